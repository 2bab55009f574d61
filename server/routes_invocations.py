"""The producer's routes: submit, read, cancel and count invocations.

A producer's calls never hold a lease: they make rows, read them and ask for their end, so the
checks here are on what is sent (fields, code in a payload without `submit-code`, a namespace's
admission) rather than on who holds an attempt; the worker's routes are in routes_work.py.
A read's `?wait=` is a long-poll held on the store's wake-up, capped at `longpoll.MAX_WAIT_S`.
"""

from __future__ import annotations

from typing import Any

from dreamlake.lakeshore import codec
from dreamlake.lakeshore.errors import Forbidden, InvalidArgument
from dreamlake.lakeshore.plane import routes
from dreamlake.lakeshore.plane.auth import MANAGE, READ, SUBMIT_CODE, SUBMIT_DATA
from dreamlake.lakeshore.plane.wakeup import reading
from dreamlake.lakeshore.storage import StorageRef
from dreamlake.lakeshore.types import (
    Invocation,
    SubmitRequest,
    check_host,
)
from dreamlake.lakeshore.workflow import epoch_of_text

from .auth import require
from .endpoint import Api, Call
from .longpoll import (
    MAX_WAIT_S,
    admit_handing,
    synced,
    wait_until,
)
from .payload_kinds import code_in
from .wire import Fields

ITEM_FIELDS = (
    "payload",
    "json",
    "key",
    "priority",
    "max_attempts",
    "timeout_s",
    "host",
    "id",
    "objects",
    "resources",
    "max_preemptions",
    "map_id",
    "nodes",
    "hang_timeout_s",
    "delay_s",
    "at",
    "after",
    "after_failure",
    "inputs",
    "runtime",
)
#: Said with a refused `?wait=`: a longer wait is allowed, and is held up to the cap.
WAIT_HINT = f"the server holds a request at most {MAX_WAIT_S:g} s; ask again to wait longer"
#: Payloads up to this size are checked for code in the event loop; bigger ones in a thread.
CHECK_INLINE_BYTES = 64 * 1024


def _max_preemptions(item: Fields) -> int | None:
    """An item's max_preemptions (issue 35); None: its queue's, else the default."""
    if item.data.get("max_preemptions") is None:
        return None
    return item.integer("max_preemptions", 0)


async def submit(call: Call) -> dict[str, Any]:
    """One request for one or many invocations: `{items: [...]}`, or a single item's fields.

    `?wait=S`: on a queue whose admission says `on_full: block`, wait up to S for room.
    """
    b = call.body
    items = b.items("items") if "items" in b.data else [b]
    if "items" in b.data:
        b.only("items")
    requests = []
    for item in items:
        item.only(*ITEM_FIELDS)
        requests.append(
            SubmitRequest(
                payload=_payload(item),
                key=item.text("key"),
                priority=item.number("priority", 0.0) or 0.0,
                max_attempts=item.integer("max_attempts", 3),
                timeout_s=item.number("timeout_s"),
                host=_host(item),
                id=item.text("id"),
                objects=_objects(item),
                # As sent: the store's check refuses it in the words every plane uses.
                resources=item.data.get("resources"),
                max_preemptions=_max_preemptions(item),
                map_id=item.text("map_id"),
                delay_s=item.number("delay_s"),
                at=_at(item),
                after=_id_list(item, "after"),
                after_failure=item.text("after_failure") or "cancel",
                inputs=_id_list(item, "inputs"),
                runtime=item.data.get("runtime"),  # checked by the store, as resources are
                # As sent, as resources are: the store refuses a bad one in every plane's words.
                nodes=item.data.get("nodes", 1),
                hang_timeout_s=item.data.get("hang_timeout_s"),  # likewise
            )
        )
    wait_s = _wait_s(call)
    result_wait = _wait_s(call, "result_wait")
    if result_wait > 0 and len(requests) != 1:
        raise InvalidArgument(
            f"'result_wait' waits for one invocation; this request submits {len(requests)}"
        )
    if result_wait > 0 and call.token is not None:  # the answer carries the result: a read
        require(call.token, (READ,), "submit-and-wait (?result_wait) answers the result, so it")
    one = len(requests) == 1
    await refuse_code(
        call,
        [
            ("the payload" if one else f"item {i}'s payload", r.payload)
            for i, r in enumerate(requests)
        ],
    )
    refuse_runtime(call, requests)
    queue = call.param("queue")
    before = call.store.waker.generation  # the submit's outcome comes after this
    # A submit-and-wait answers after its job's ack, whose fsync carries the submit to disk
    # as well: its own commit waits for no disk (`sync_later`), and `synced` below holds the
    # answer until a flush has covered it. A keyed submit commits durably: its id may be
    # answered to another producer sending the same key, perhaps a process of its own on the
    # same file, which cannot know what this one owes.
    owes = result_wait > 0 and requests[0].key is None
    ids = await admit_handing(
        call.store, call.seats, call.ns, queue, requests, wait_s, sync_later=owes
    )
    if result_wait <= 0:
        return {"ids": ids}
    owed = call.store.connector.mark() if owes else None
    # Submit-and-wait: an RPC in one round trip. The row comes back terminal, or as it stands
    # when the wait runs out (the client then polls `GET /invocations/{id}`). A key that
    # named an existing invocation may be terminal already: it is read first then.
    # An ack on this server hands its row to the reader; one elsewhere wakes it to read.
    with call.readers.awaiting(ids[0]) as reader:
        inv = await wait_until(
            call.store,
            lambda: call.store.invocation(call.ns, ids[0]),
            lambda i: i.terminal,
            result_wait,
            call.request,
            work=reading(ids[0]),
            read=True,
            since=None if requests[0].key else before,
            reader=reader,
        )
    if owed is not None:
        await synced(call.store, owed)
    return {"ids": ids, "invocation": inv}


def _id_list(item: Fields, name: str) -> tuple[str, ...]:
    """An item's `after` or `inputs`: a list of invocation ids (the store checks each)."""
    value = item.data.get(name)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InvalidArgument(f"'{name}' must be a list of invocation ids, got {value!r:.80}")
    return tuple(value)


def _at(item: Fields) -> float | None:
    """A submit item's `at`: epoch seconds, or an ISO 8601 string (no zone: UTC)."""
    value = item.data.get("at")
    if value is None or not isinstance(value, str):
        return item.number("at")
    return epoch_of_text(value, "'at'")


def _wait_s(call: Call, key: str = "wait") -> float:
    """`?wait=` (or `?result_wait=`): any finite number of seconds, held up to MAX_WAIT_S."""
    return call.query.number(key, 0.0, unit="seconds", hint=WAIT_HINT)


def _host(fields: Fields) -> str | None:
    """A locality hint or a claimer's host: a host id, checked here to name the field."""
    return check_host(fields.text("host"), f"field '{fields.where('host')}'")


def _objects(item: Fields) -> tuple[StorageRef, ...]:
    """The objects a submit made that its payload names only inside a pickle (its thunk's
    spilled arguments): `[{url, key, size}]`, for retention to delete with the row."""
    if "objects" not in item.data:
        return ()
    out = []
    for entry in item.items("objects"):
        entry.only("url", "key", "size")
        url, key, size = entry.req_text("url"), entry.req_text("key"), entry.integer("size", 0)
        try:
            out.append(StorageRef(url, key, size))
        except InvalidArgument as exc:
            raise InvalidArgument(f"field '{entry.where('key')}': {exc}") from None
    return tuple(out)


def _payload(item: Fields) -> bytes:
    """`payload` (msgpack bytes) or, for curl and other languages, `json`: any JSON value.

    Encoding a JSON value is safe on the server; it never decodes a payload. It is encoded as
    the SDK would (`codec.encode`): an integer past 64 bits rides as the codec's big integer, and
    what no codec can carry (a lone surrogate, a document nested past the recursion limit) is a
    400 naming the field.
    """
    if "json" in item.data:
        if "payload" in item.data:
            raise InvalidArgument("give 'payload' (msgpack bytes) or 'json' (a value), not both")
        try:
            return codec.encode(item.data["json"])
        except InvalidArgument as exc:
            raise InvalidArgument(f"field '{item.where('json')}': {exc}") from None
    return item.req_blob("payload")


def refuse_runtime(call: Call, requests: list[SubmitRequest]) -> None:
    """A job's runtime ships code (its bundle) and what to install to the workers: like a
    payload with code, it needs `submit-code`."""
    token = call.token
    if token is None or token.allows(SUBMIT_CODE):
        return
    if any(r.runtime is not None for r in requests):
        raise Forbidden(
            f"a job's runtime ships code and requirements to the workers: it needs a token with "
            f"the '{SUBMIT_CODE}' scope; this token's scopes: {token.describe()}"
        )


async def refuse_code(call: Call, values: list[tuple[str, bytes | None]]) -> None:
    """Without `submit-code`, what a token sends may hold plain data only (docs/security.md).

    `values` are (what to call it in a message, the bytes). The check reads the msgpack
    structure and never unpickles (payload_kinds.py); a token that may send code skips it.
    """
    token = call.token
    if token is None or token.allows(SUBMIT_CODE):
        return
    for where, value in values:
        if value is None:
            continue
        try:
            if len(value) <= CHECK_INLINE_BYTES:
                found = code_in(value)
            else:
                found = await call.run(code_in, value)
        except InvalidArgument as exc:
            raise InvalidArgument(f"{where}: {exc}") from None
        if found is not None:
            raise Forbidden(
                f"{where} carries {found}: sending code to the workers needs a token with the "
                f"'{SUBMIT_CODE}' scope; this token's scopes: {token.describe()} (without it, "
                "send plain values, or raw envelopes for a worker's --handler)"
            )


async def count(call: Call) -> dict[str, int]:
    state = call.query.text("state") or "queued"
    return {"count": await call.run(call.store.count, call.ns, call.param("queue"), state)}


async def get_invocation(call: Call) -> Invocation:
    wait_s = _wait_s(call)
    inv_id = call.param("id")
    return await wait_until(
        call.store,
        lambda: call.store.invocation(call.ns, inv_id),
        lambda inv: inv.terminal,
        wait_s,
        call.request,
        work=reading(inv_id),
        read=True,
    )


async def cancel(call: Call) -> dict[str, bool]:
    call.body.only("kill")
    kill = call.body.boolean("kill")
    done = await call.run(call.store.cancel, call.ns, call.param("id"), kill=kill)
    return {"cancelled": done}


ROUTES = [
    Api(
        routes.SUBMIT,
        submit,
        "Submit one or a batch in one transaction; a known key returns its existing id; "
        "?wait=S waits for room on a full on_full=block queue (else 429); "
        "?result_wait=S (one item) also waits for it to end and answers the invocation",
        status=201,
        body="SubmitBatch",
        response="IdList",
        query=("wait", "result_wait"),
        scopes=(SUBMIT_DATA,),
    ),
    Api(
        routes.COUNT,
        count,
        "How many invocations are in a state",
        response="Count",
        query=("state",),
        scopes=(READ,),
    ),
    Api(
        routes.INVOCATION,
        get_invocation,
        "The invocation row; ?wait=S long-polls until it is terminal (capped at 60 s)",
        response="Invocation",
        query=("wait",),
        scopes=(READ,),
    ),
    Api(
        routes.CANCEL,
        cancel,
        "Cancel a queued one; kill=true also asks the worker to end a running one",
        body="Cancel",
        response="Cancelled",
        scopes=(SUBMIT_DATA, MANAGE),
    ),
]
