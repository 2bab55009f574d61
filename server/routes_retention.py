"""Retention over HTTP: `POST /retention/trim`, and the server's periodic retention task.

The route trims the path's namespace, deletes the plane-tier copies (this server's own
`--storage`) of the spilled objects of the rows it deleted and of the namespace's objects whose
time to live ran out (`objects/expiry.py`), and answers the counts plus the other
spilled refs, so that the client (which holds the storage credentials) deletes those objects. The
periodic task (`lakeshore server --retain-frames-s/--retain-invocations-s`) trims every
namespace and deletes the refs itself, best effort: a server that cannot reach a storage logs it
and leaves the object (an orphan costs bytes, never correctness). See `plane/retention.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from dreamlake.lakeshore.objects import expiry
from dreamlake.lakeshore.plane import routes
from dreamlake.lakeshore.plane.auth import MANAGE
from dreamlake.lakeshore.plane.store import SqlStore
from dreamlake.lakeshore.spill import delete_refs

from .blocking import run_blocking
from .endpoint import Api, Call
from .openapi_parts import INT, SECONDS, STR, _nullable, _obj
from .openapi_schemas import SCHEMAS
from .routes_objects import ObjectTier, delete_owned

log = logging.getLogger("lakeshore.server")

#: How often the retention task runs when the server has one.
RETENTION_INTERVAL_S = 300.0

# The route's schemas, registered beside the others (openapi_schemas.SCHEMAS) on import.
SCHEMAS.setdefault(
    "RetentionTrim",
    _obj(
        {
            "frames_older_than_s": _nullable(SECONDS),
            "invocations_older_than_s": _nullable(SECONDS),
        }
    ),
)
SCHEMAS.setdefault(
    "Trimmed",
    _obj(
        {
            "frames": INT,
            "invocations": INT,
            "runtime_blobs": {**INT, "description": "runtime blobs no kept bundle named"},
            "refs": {
                "type": "array",
                "items": _obj({"url": STR, "key": STR, "size": INT}),
                "description": "spilled objects of the deleted rows, for the caller to delete "
                "(those in this server's plane tier it deleted itself)",
            },
        }
    ),
)


async def trim(call: Call) -> dict[str, Any]:
    """Trim this namespace: `{frames_older_than_s, invocations_older_than_s}` (null: keep)."""
    b = call.body
    b.only("frames_older_than_s", "invocations_older_than_s")
    frames = b.number("frames_older_than_s")
    rows = b.number("invocations_older_than_s")
    trimmed = await call.run(
        call.store.trim_retention,
        frames_older_than_s=frames,
        invocations_older_than_s=rows,
        ns=call.ns,
    )
    tier = call.request.app.state.lakeshore_objects
    trimmed.refs, _, problems = await call.run(delete_owned, tier, call.ns, trimmed.refs)
    for line in problems:
        log.warning("retention could not delete a plane-tier object: %s", line)
    await call.run(expiry.sweep, tier.storage, tier.key(call.ns, ""))
    return trimmed.public()


ROUTES = [
    Api(
        routes.TRIM_RETENTION,
        trim,
        "Trim frames and rows of invocations that ended before the given ages",
        body="RetentionTrim",
        response="Trimmed",
        scopes=(MANAGE,),
    ),
]


def trim_once(
    store: SqlStore, tier: ObjectTier, frames_s: float | None, invocations_s: float | None
) -> None:
    """One pass over every namespace; the spilled objects of deleted rows are deleted too, each
    namespace's plane-tier copies by the namespace's own trim (`delete_owned`)."""
    frames = invocations = deleted = 0
    problems: list[str] = []
    for row in store.list_namespaces():
        ns = str(row["name"])
        trimmed = store.trim_retention(
            frames_older_than_s=frames_s, invocations_older_than_s=invocations_s, ns=ns
        )
        left, _, lost = delete_owned(tier, ns, trimmed.refs)
        lost += delete_refs(left)
        frames += trimmed.frames
        invocations += trimmed.invocations
        deleted += len(trimmed.refs) - len(lost)
        problems += lost
    expired = expiry.sweep(tier.storage)
    if expired:
        log.info("retention deleted %d objects whose time to live ran out", expired)
    if frames or invocations:
        log.info(
            "retention trimmed %d frames, %d invocations, %d spilled objects",
            frames,
            invocations,
            deleted,
        )
    for line in problems:
        log.warning("retention could not delete a spilled object: %s", line)


async def _loop(
    store: SqlStore,
    tier: ObjectTier,
    frames_s: float | None,
    invocations_s: float | None,
    interval_s: float,
) -> None:
    while True:
        try:
            await run_blocking(trim_once, store, tier, frames_s, invocations_s)
        except Exception:  # retried next tick; never kill the loop
            log.exception("retention trim failed")
        await asyncio.sleep(interval_s)


def start(
    store: SqlStore,
    tier: ObjectTier,
    frames_s: float | None,
    invocations_s: float | None,
    interval_s: float = RETENTION_INTERVAL_S,
) -> asyncio.Task[None] | None:
    """The retention task, started in the app's lifespan; None when both ages are off."""
    if frames_s is None and invocations_s is None:
        return None
    return asyncio.create_task(_loop(store, tier, frames_s, invocations_s, interval_s))


async def stop(task: asyncio.Task[None] | None) -> None:
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
