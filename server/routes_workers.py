"""Worker rows: register, heartbeat, list, show, state. Membership edits are on the Queues page.

A worker is addressed by id or name (`ref`); the store resolves both within the namespace in
the path, which is also what keeps a heartbeat from touching another namespace's worker.
"""

from __future__ import annotations

from typing import Any

from dreamlake.lakeshore.plane import routes
from dreamlake.lakeshore.plane.auth import MANAGE, READ, WORK
from dreamlake.lakeshore.types import WorkerInfo, check_host

from .endpoint import Api, Call

REGISTER_FIELDS = ("name", "queues", "host", "pid", "info")


async def register(call: Call) -> WorkerInfo:
    b = call.body
    b.only(*REGISTER_FIELDS)
    name = b.req_text("name")
    pid = b.integer("pid", -1)
    return await call.run(
        call.store.register_worker,
        call.ns,
        name,
        queues=b.str_list("queues"),
        host=check_host(b.text("host"), "field 'host'"),
        pid=pid if pid >= 0 else None,
        info=b.mapping("info"),
    )


async def list_workers(call: Call) -> dict[str, Any]:
    return {"workers": await call.run(call.store.workers, call.ns)}


async def show_worker(call: Call) -> WorkerInfo:
    return await call.run(call.store.worker, call.ns, call.param("ref"))


async def heartbeat(call: Call) -> WorkerInfo:
    b = call.body
    b.only("load", "state")
    load = b.mapping("load") or {}
    state = b.text("state") or "alive"

    def run() -> WorkerInfo:
        worker = call.store.worker(call.ns, call.param("ref"))
        return call.store.heartbeat(worker.id, load, state=state)

    worker = await call.run(run)
    if state == "draining":  # its claim long-poll here has nothing more to wait for
        call.seats.dismiss(call.ns, worker.name)
    return worker


async def set_state(call: Call) -> WorkerInfo:
    call.body.only("state")
    state = call.body.req_text("state")
    return await call.run(call.store.set_worker_state, call.ns, call.param("ref"), state)


ROUTES = [
    Api(
        routes.REGISTER_WORKER,
        register,
        "Register a worker row (retires a live one of that name)",
        status=201,
        body="WorkerRegister",
        response="WorkerInfo",
        scopes=(WORK,),
    ),
    Api(
        routes.WORKERS,
        list_workers,
        "Worker rows of the namespace",
        response="WorkerList",
        scopes=(READ, WORK),
    ),
    Api(
        routes.WORKER,
        show_worker,
        "A worker by id or name",
        response="WorkerInfo",
        scopes=(READ, WORK),
    ),
    Api(
        routes.HEARTBEAT,
        heartbeat,
        "Heartbeat with load figures",
        body="Heartbeat",
        response="WorkerInfo",
        scopes=(WORK,),
    ),
    Api(
        routes.WORKER_STATE,
        set_state,
        "Set alive | draining | preempting | gone",
        body="WorkerState",
        response="WorkerInfo",
        scopes=(WORK, MANAGE),
    ),
]
