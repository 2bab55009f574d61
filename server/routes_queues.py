"""The routes of the Queues page: queue rows, their lifecycle, events, stats, membership.

Each handler checks the body's shape and hands the store one call in one worker thread; the
rules (default queue reserved, rm with members, patchable fields) are the store's.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from dreamlake.lakeshore.plane import routes
from dreamlake.lakeshore.plane.auth import MANAGE, READ, WORK
from dreamlake.lakeshore.plane.store import SqlStore, check_elasticity
from dreamlake.lakeshore.types import QueueInfo, WorkerInfo

from .endpoint import Api, Call

QUEUE_FIELDS = ("name", "kind", "description", "elasticity", "admission", "resources")
PATCH_FIELDS = ("description", "admission", "elasticity", "kind")
#: What `?elasticity=` may say: absent, an elasticity naming its `kind` replaces the policy.
ELASTICITY_MODES = ("merge",)


async def create_queue(call: Call) -> QueueInfo:
    b = call.body
    b.only(*QUEUE_FIELDS)
    name = b.req_text("name")
    fields: dict[str, Any] = {}
    for key, value in (
        ("kind", b.text("kind")),
        ("description", b.text("description")),
        ("elasticity", b.mapping("elasticity")),
        ("admission", b.mapping("admission")),
    ):
        if value is not None:
            fields[key] = value
    if "resources" in b.data:  # checked by the store, whose refusal every plane shares
        fields["resources"] = b.data["resources"]
    return await call.run(call.store.create_queue, call.ns, name, **fields)


async def list_queues(call: Call) -> dict[str, Any]:
    state = call.query.text("state") or None

    def run() -> list[QueueInfo]:
        return call.store.queues(call.store.org_namespaces(call.ns), state)

    return {"queues": await call.run(run)}


async def show_queue(call: Call) -> dict[str, Any]:
    name = call.param("name")

    def run() -> tuple[QueueInfo, list[WorkerInfo]]:
        return call.store.queue(call.ns, name), call.store.members(call.ns, name)

    info, members = await call.run(run)
    return {**asdict(info), "members": members}


async def patch_queue(call: Call) -> QueueInfo:
    """PATCH merges; an `elasticity` that names its `kind` replaces the whole policy object.

    That is how the Queues page changes a policy over HTTP. `?elasticity=merge` keeps the SDK's
    `patch_queue` rule instead (the policy kind cannot change), which `HttpDispatch` sends so
    that both planes behave alike.
    """
    b = call.body
    name = call.param("name")
    # Unknown fields go through to the store, whose refusal is the same on every plane.
    changes: dict[str, Any] = {k: v for k, v in b.data.items() if k not in PATCH_FIELDS}
    if "description" in b.data:
        changes["description"] = b.text("description")
    for key in ("admission", "elasticity"):
        if key in b.data:
            changes[key] = b.mapping(key)
    if "kind" in b.data:
        changes["kind"] = b.text("kind")
    merge = call.query.choice("elasticity", ELASTICITY_MODES) == "merge"
    replace = None if merge else changes.get("elasticity")
    if replace is not None and "kind" in replace:
        changes.pop("elasticity")
        check_elasticity(replace)  # refuse before writing anything
        return await call.run(_patch_replacing, call.store, call.ns, name, changes, replace)
    return await call.run(call.store.patch_queue, call.ns, name, changes)


def _patch_replacing(
    store: SqlStore, ns: str, name: str, changes: dict[str, Any], elasticity: dict[str, Any]
) -> QueueInfo:
    if changes:
        store.patch_queue(ns, name, changes)
    return store.replace_elasticity(ns, name, elasticity)


def _lifecycle(action: str) -> Api:
    async def handler(call: Call) -> QueueInfo:
        return await call.run(call.store.set_queue_state, call.ns, call.param("name"), action)

    summary = {
        "archive": "Archive a queue (soft delete: no submits, no claims); 409 on default",
        "unarchive": "Back to active (reverses archive and drain)",
        "drain": "Stop admitting submits; in-flight work finishes",
    }[action]
    return Api(
        routes.QUEUE_ACTIONS[action],
        handler,
        summary,
        response="QueueInfo",
        scopes=(MANAGE,),
    )


async def delete_queue(call: Call) -> None:
    force = call.query.boolean("force")
    await call.run(call.store.delete_queue, call.ns, call.param("name"), force=force)


async def queue_events(call: Call) -> dict[str, Any]:
    limit = call.query.integer("limit", 50)
    verbose = call.query.boolean("verbose")
    events = await call.run(call.store.events, call.ns, call.param("name"), limit=limit)
    if not verbose:
        events = [{k: v for k, v in e.items() if k != "detail"} for e in events]
    return {"events": events}


async def queue_stats(call: Call) -> dict[str, Any]:
    return await call.run(call.store.stats, call.ns, call.param("name"))


async def worker_queues(call: Call) -> WorkerInfo:
    b = call.body
    b.only("add", "remove")
    add, remove = b.str_list("add"), b.str_list("remove")
    return await call.run(
        call.store.update_worker_queues, call.ns, call.param("id"), add=add, remove=remove
    )


ROUTES = [
    Api(
        routes.CREATE_QUEUE,
        create_queue,
        "Create a queue; 409 if it exists",
        status=201,
        body="QueueCreate",
        response="QueueInfo",
        scopes=(MANAGE,),
    ),
    Api(
        routes.QUEUES,
        list_queues,
        "List queues of the namespace's org (default materialises)",
        response="QueueList",
        query=("state",),
        scopes=(READ, WORK),
    ),
    Api(
        routes.QUEUE,
        show_queue,
        "A queue row and its live members",
        response="QueueShow",
        scopes=(READ, WORK),
    ),
    Api(
        routes.PATCH_QUEUE,
        patch_queue,
        "Patch description / admission / elasticity (an elasticity with 'kind' replaces it)",
        body="QueuePatch",
        response="QueueInfo",
        query=("elasticity",),
        scopes=(MANAGE,),
    ),
    _lifecycle("archive"),
    _lifecycle("unarchive"),
    _lifecycle("drain"),
    Api(
        routes.DELETE_QUEUE,
        delete_queue,
        "Delete a queue; 409 with members unless force=true scrubs them",
        status=204,
        query=("force",),
        scopes=(MANAGE,),
    ),
    Api(
        routes.QUEUE_EVENTS,
        queue_events,
        "Queue events, newest first",
        response="EventList",
        query=("verbose", "limit"),
        scopes=(READ,),
    ),
    Api(
        routes.QUEUE_STATS,
        queue_stats,
        "daemon_count, slots, pending, utilization",
        response="QueueStats",
        scopes=(READ,),
    ),
    Api(
        routes.WORKER_QUEUES,
        worker_queues,
        "Edit a worker's membership ('default' is the empty list, not a name)",
        body="MembershipEdit",
        response="WorkerInfo",
        scopes=(MANAGE,),
    ),
]
