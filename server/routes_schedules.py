"""Cron schedules of a namespace (issue 36, item 3): `lakeshore schedules add / ls / show /
pause / resume / run-now / rm`, and `dls.schedule` over HTTP.

`PUT /schedules/{name}` creates or replaces one (a deploy that runs its `dls.schedule` calls
again changes nothing it did not change). The job template is a submit item's fields, checked
as a submit's are: a token without `submit-code` may schedule plain values only. Firing is the
server's sweeper's (and every claim's), not a route: see sdk/plane/store/schedules.py.
"""

from __future__ import annotations

from typing import Any

from dreamlake.lakeshore.plane import routes
from dreamlake.lakeshore.plane.auth import READ, SUBMIT_DATA
from dreamlake.lakeshore.plane.schedules import ScheduleInfo
from dreamlake.lakeshore.types import SubmitRequest

from .endpoint import Api, Call
from .routes_invocations import _max_preemptions, _payload, refuse_code

TEMPLATE_FIELDS = ("payload", "json", "priority", "max_attempts", "timeout_s", "resources")
#: A submit item's fields that belong to one job: taken, so that the store refuses them in the
#: words every plane uses.
ONE_JOB = ("key", "id", "map_id", "delay_s", "at")
FIELDS = ("cron", "tz", "queue", "catchup", "overlap", "max_preemptions", *TEMPLATE_FIELDS)


async def put_schedule(call: Call) -> ScheduleInfo:
    b = call.body
    b.only(*FIELDS, *ONE_JOB)
    template = SubmitRequest(
        payload=_payload(b),
        priority=b.number("priority", 0.0) or 0.0,
        max_attempts=b.integer("max_attempts", 3),
        timeout_s=b.number("timeout_s"),
        resources=b.data.get("resources"),  # as sent: the store's check names what is wrong
        max_preemptions=_max_preemptions(b),
        key=b.text("key"),
        id=b.text("id"),
        map_id=b.text("map_id"),
        delay_s=b.number("delay_s"),
        at=b.number("at") if not isinstance(b.data.get("at"), str) else 0.0,
    )
    await refuse_code(call, [("the schedule's payload", template.payload)])
    return await call.run(
        call.store.put_schedule,
        call.ns,
        call.param("name"),
        cron=b.req_text("cron"),
        queue=b.req_text("queue"),
        template=template,
        tz=b.text("tz") or "UTC",
        catchup=b.text("catchup") or "latest",
        overlap=b.text("overlap") or "allow",
    )


async def list_schedules(call: Call) -> dict[str, Any]:
    return {"schedules": await call.run(call.store.schedules, call.ns)}


async def show_schedule(call: Call) -> ScheduleInfo:
    return await call.run(call.store.schedule, call.ns, call.param("name"))


async def delete_schedule(call: Call) -> None:
    await call.run(call.store.delete_schedule, call.ns, call.param("name"))


async def run_schedule(call: Call) -> dict[str, str]:
    """The schedule's job, submitted now; `run_id` (a ULID) keys it, so a retry is one job."""
    b = call.body
    b.only("run_id")
    run_id = b.text("run_id")
    job = await call.run(call.store.run_schedule, call.ns, call.param("name"), run_id)
    return {"id": job}


def _state_route(action: str, summary: str) -> Api:
    async def handler(call: Call) -> ScheduleInfo:
        return await call.run(call.store.set_schedule_state, call.ns, call.param("name"), action)

    return Api(
        routes.SCHEDULE_ACTIONS[action],
        handler,
        summary,
        response="ScheduleInfo",
        scopes=(SUBMIT_DATA,),
    )


ROUTES = [
    Api(
        routes.SCHEDULES,
        list_schedules,
        "Cron schedules of the namespace, with their next fire times",
        response="ScheduleList",
        scopes=(READ,),
    ),
    Api(
        routes.PUT_SCHEDULE,
        put_schedule,
        "Create or replace a cron schedule (its state and counts stay)",
        body="SchedulePut",
        response="ScheduleInfo",
        scopes=(SUBMIT_DATA,),
    ),
    Api(
        routes.SCHEDULE,
        show_schedule,
        "One schedule: next_fire_at, last_fired_at, fired and missed slots",
        response="ScheduleInfo",
        scopes=(READ,),
    ),
    _state_route("pause", "Stop firing a schedule"),
    _state_route("resume", "Fire again from the next slot (catchup 'all': from the first held)"),
    Api(
        routes.RUN_SCHEDULE,
        run_schedule,
        "Submit the schedule's job now, outside its cron; its next slot stays",
        body="ScheduleRun",
        response="ScheduleRunId",
        scopes=(SUBMIT_DATA,),
    ),
    Api(
        routes.DELETE_SCHEDULE,
        delete_schedule,
        "Remove a schedule; the jobs it fired stay",
        204,
        scopes=(SUBMIT_DATA,),
    ),
]
