"""Job routes for operators: list a namespace's invocations, and retry a terminal one.

The producer and worker routes (`routes_invocations.py`, `routes_work.py`) address one
invocation a client already holds; these are what `lakeshore jobs` and the dashboard need on
top: a filtered, newest-first listing (without payload or result bytes: a listing should stay
small), and an explicit retry of a failed / killed / timeout job as one more attempt under the
same id.
"""

from __future__ import annotations

from typing import Any

from dreamlake.lakeshore.plane import routes
from dreamlake.lakeshore.plane.auth import MANAGE, READ, SUBMIT_DATA
from dreamlake.lakeshore.types import Invocation

from .endpoint import Api, Call

#: The most rows one listing returns; older ones page with `?before=<last id>`.
MAX_LIST_LIMIT = 1000


async def list_invocations(call: Call) -> dict[str, Any]:
    q = call.query
    rows = await call.run(
        call.store.invocations,
        call.ns,
        queue=q.text("queue") or None,
        state=q.text("state") or None,
        limit=q.integer("limit", 50),
        before=q.text("before") or None,
        map_id=q.text("map") or None,
    )
    return {"invocations": rows}


async def retry_invocation(call: Call) -> Invocation:
    call.body.only()
    return await call.run(call.store.retry, call.ns, call.param("id"))


ROUTES = [
    Api(
        routes.INVOCATIONS,
        list_invocations,
        "Invocations of the namespace, newest first, without payload/result bytes; "
        "filter by ?queue and ?state (or ?map=<map id> alone), page with ?before=<id>",
        response="InvocationList",
        query=("queue", "state", "limit", "before", "map"),
        scopes=(READ,),
    ),
    Api(
        routes.RETRY,
        retry_invocation,
        "Requeue a failed / killed / timeout invocation as a new attempt (409 otherwise)",
        response="Invocation",
        scopes=(SUBMIT_DATA, MANAGE),
    ),
]
