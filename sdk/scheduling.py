"""`dls.schedule`: a cron schedule that submits a job at every slot (issue 36, item 3).

    dls.schedule("nightly-eval", cron="0 3 * * *", tz="Europe/Berlin",
                 queue="eval", payload=dls.thunk(evaluate, "latest"))

The schedule is a row in the plane (sdk/plane/schedules.py has the rules, store/schedules.py
the firing): nothing in this process runs it, and calling `schedule` again with the same name
replaces its cron and job, so a deploy script may declare its schedules on every run. The job
is encoded here as `submit` would encode it (a plain value, a thunk, a udf call's envelope) and
stored as bytes; every firing submits those bytes, keyed `schedule:<name>:<slot>`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .envelope import Envelope
from .plane.base import Plane
from .plane.schedules import ScheduleInfo, check_template
from .queue import Queue, SyncQueue


def schedule(
    name: str,
    cron: str,
    *,
    queue: str | SyncQueue | Queue = "default",
    payload: Any = None,
    tz: str = "UTC",
    catchup: str = "latest",
    overlap: str = "allow",
    priority: float | None = None,
    max_attempts: int = 3,
    timeout_s: float | None = None,
    resources: Mapping[str, Any] | None = None,
    max_preemptions: int | None = None,
    dispatch: Plane | None = None,
) -> ScheduleInfo:
    """Create or replace the schedule `name`: at each slot of `cron` in `tz`, submit `payload`
    (a value, `dls.thunk(...)`, or a udf call's `f.envelope(...)`) to `queue`.

    `catchup` (none | latest | all) says what slots missed while nothing ran fire; `overlap`
    (allow | skip) whether a slot fires while the last job is still live. `queue` is a name or
    a queue handle (its plane is then the schedule's); `dispatch`, the plane for a name
    (default: the process default)."""
    q = _queue(queue, dispatch)
    envelope = payload if isinstance(payload, Envelope) else None
    template = q._request(
        None if envelope is not None else payload,
        envelope,
        None,
        priority,
        max_attempts,
        timeout_s,
        resources=resources,
        max_preemptions=max_preemptions,
    )
    check_template(template)
    return q.dispatch.put_schedule(
        name,
        cron=cron,
        queue=q.name,
        template=template,
        tz=tz,
        catchup=catchup,
        overlap=overlap,
    )


def _queue(queue: str | SyncQueue | Queue, dispatch: Plane | None) -> SyncQueue:
    if isinstance(queue, Queue):
        return queue.sync
    if isinstance(queue, SyncQueue):
        return queue
    return SyncQueue(queue, dispatch=dispatch)
