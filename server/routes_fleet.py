"""The fleet routes: what the elastic controller reads and writes across every namespace.

`lakeshore-controller --url` runs against a server instead of the database: it reads every
namespace's queues, live counts, workers and provider configs in one call, drains the workers it
scales down, records its decisions as queue events, and elects one leader among controllers by a
lease. All of it spans namespaces, so only an admin token may (the first start's bootstrap token,
or `lakeshore tokens create --admin`): each route needs the `admin` scope, which the endpoint
checks before the handler runs. An admin token opens nothing else.
"""

from __future__ import annotations

from typing import Any

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.plane import routes
from dreamlake.lakeshore.plane.auth import ADMIN
from dreamlake.lakeshore.types import WorkerInfo

from .endpoint import Api, Call


async def fleet(call: Call) -> dict[str, Any]:
    view, providers = await call.run(call.store.fleet)
    return {**view, "providers": providers}


async def record_events(call: Call) -> None:
    call.body.only("events", "now")
    now = call.body.number("now")
    events = []
    for item in call.body.items("events"):
        item.only("namespace", "queue", "kind", "detail")
        events.append(
            (
                item.req_text("namespace"),
                item.req_text("queue"),
                item.req_text("kind"),
                item.mapping("detail") or {},
            )
        )
    if now is None:
        raise InvalidArgument("field 'now' is required")
    await call.run(call.store.record_events, events, now)


async def worker_state(call: Call) -> WorkerInfo:
    b = call.body
    b.only("namespace", "ref", "state")
    return await call.run(
        call.store.set_worker_state, b.req_text("namespace"), b.req_text("ref"), b.req_text("state")
    )


async def lead(call: Call) -> dict[str, Any]:
    b = call.body
    b.only("name", "holder", "ttl_s", "release")
    name, holder = b.req_text("name"), b.req_text("holder")
    if b.boolean("release"):
        await call.run(call.store.release_leadership, name, holder)
        return {"leading": False}
    ttl_s = b.number("ttl_s")
    if ttl_s is None:
        raise InvalidArgument("field 'ttl_s' is required")
    return {"leading": await call.run(call.store.acquire_leadership, name, holder, ttl_s)}


ROUTES = [
    Api(
        routes.FLEET,
        fleet,
        "Admin: every namespace's queues, live counts, workers and provider configs",
        response="Fleet",
        scopes=(ADMIN,),
    ),
    Api(
        routes.FLEET_EVENTS,
        record_events,
        "Admin: record queue events (the controller's decisions) in one transaction",
        204,
        body="FleetEvents",
        scopes=(ADMIN,),
    ),
    Api(
        routes.FLEET_WORKER_STATE,
        worker_state,
        "Admin: set a worker's state in any namespace (the controller drains what it scales down)",
        body="FleetWorkerState",
        response="WorkerInfo",
        scopes=(ADMIN,),
    ),
    Api(
        routes.FLEET_LEADER,
        lead,
        "Admin: take, keep or release a leadership lease (one acting controller)",
        body="FleetLeader",
        response="FleetLeading",
        scopes=(ADMIN,),
    ),
]
