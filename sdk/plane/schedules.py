"""Cron schedules (issue 36, item 3): the record, its checks, and which slot a firing fires.

A schedule is a row: a cron expression in a time zone, the queue it submits to, and the job
it submits, stored as the submit request would be (payload bytes, priority, attempts, ...).
Firing is the store's (store/schedules.py): one transaction per slot that moves the row's
`next_fire_at` on and submits the job with the key `schedule:<name>:<slot>`, so any number of
servers and embedded processes may run it and a slot still fires once.

What a firing does when it comes late is `plan`'s, a pure function of the row and the clock:

- `catchup`: what to do with slots that passed while nothing ran. `latest` (the default) fires
  the most recent one and counts the others as missed; `all` fires every one, oldest first;
  `none` fires the most recent one only if it is at most MISFIRE_GRACE_S old, and otherwise
  nothing. A firing that is merely a sweep late is not a missed slot under any of them.
- `overlap`: `allow` fires whatever ran before; `skip` counts the slot as missed while the last
  job it fired is still queued, scheduled or running.

Pausing stops firing; `resume` starts again from the next slot after the resume, as `none`
would for the paused span, unless the schedule's catchup is `all`, which then fires the slots
of the paused span too. Slots of a paused span are not counted as missed: nobody missed them.

This module is the record and its checks (HttpPlane needs them without the store).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.resources import check_optional
from dreamlake.lakeshore.types import SubmitRequest, check_name

from .cron import Cron

if TYPE_CHECKING:
    from .connector import Row

CATCHUP = ("none", "latest", "all")
OVERLAP = ("allow", "skip")
SCHEDULE_STATES = ("active", "paused")
#: A slot at most this old still fires under catchup `none`: a sweep a little late (a server
#: restarting, an embedded box whose only process polls every second) is not a missed slot.
MISFIRE_GRACE_S = 60.0
#: Missed slots counted per gap, at most (a minute cron down for a year is 525,600 of them:
#: counting them one by one would stall the firing that counts them).
MAX_COUNTED = 10_000
#: A schedule's job template carries its payload inline, up to this size.
MAX_TEMPLATE_BYTES = 1 << 20


@dataclass(frozen=True)
class ScheduleInfo:
    """A schedule row, without its payload bytes (`schedules show` never decodes them)."""

    namespace: str
    name: str
    queue: str
    cron: str
    tz: str
    catchup: str
    overlap: str
    state: str
    #: The next slot to fire (epoch seconds): when it comes, a sweep fires it.
    next_fire_at: float | None = None
    #: When the last firing ran, and the slot it fired.
    last_fired_at: float | None = None
    last_slot: float | None = None
    #: The job the last firing submitted (what `overlap: skip` watches).
    last_job: str | None = None
    #: Slots fired, and slots that passed unfired (catchup, overlap, a refused submit).
    fired: int = 0
    missed: int = 0
    #: Why the last slot that did not fire did not (a skip under overlap, a full queue).
    last_error: str | None = None
    priority: float = 0.0
    max_attempts: int = 3
    timeout_s: float | None = None
    resources: dict[str, Any] | None = None
    max_preemptions: int | None = None
    created_at: float = 0.0
    updated_at: float = 0.0


class Firing(NamedTuple):
    """What one firing of a due schedule does: the slot it fires (None: none), the row's next
    `next_fire_at`, and how many slots it counts as missed."""

    slot: float | None
    next_fire_at: float
    missed: int


def check_choice(value: object, what: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise InvalidArgument(f"{what} must be one of {'|'.join(allowed)}, got {value!r}")
    return str(value)


def check_schedule(
    name: object,
    cron: object,
    tz: object,
    queue: object,
    catchup: object,
    overlap: object,
    template: SubmitRequest,
    now: float,
) -> Cron:
    """Everything a schedule is made of, checked before anything is stored; its `Cron`."""
    check_name(name, "schedule")
    check_name(queue)
    checked = Cron(cron, tz)  # type: ignore[arg-type]  # checks both, naming each
    checked.check_fires(now)
    check_choice(catchup, "catchup", CATCHUP)
    check_choice(overlap, "overlap", OVERLAP)
    check_template(template)
    return checked


def check_template(req: SubmitRequest) -> None:
    """A schedule's job: what a submit carries, less what belongs to one job only."""
    from .store.records import check_submit

    for what, value in (
        ("key", req.key),
        ("id", req.id),
        ("map_id", req.map_id),
        ("delay_s", req.delay_s),
        ("at", req.at),
    ):
        if value is not None:
            raise InvalidArgument(
                f"a schedule's job takes no {what}: each firing makes its own job, keyed "
                "schedule:<name>:<slot>"
            )
    if req.runtime is not None:
        raise InvalidArgument(
            "a schedule's job takes no runtime: retention keeps a bundle only while a job names "
            "it, so a firing days later could find it gone; install its code on the workers"
        )
    if req.objects:
        raise InvalidArgument(
            "a schedule's payload must not own spilled objects (each firing's job would "
            "delete them with its row): pass big inputs as a Ref from dls.put"
        )
    check_submit(req)
    if len(req.payload) > MAX_TEMPLATE_BYTES:
        raise InvalidArgument(
            f"a schedule's payload is at most {MAX_TEMPLATE_BYTES} bytes inline, got "
            f"{len(req.payload)}: pass big inputs as a Ref from dls.put"
        )
    check_optional(req.resources)


def plan(row: Row, now: float) -> Firing:
    """Which slot a due schedule fires now (see the module docstring for the rules)."""
    cron = Cron(row["cron"], row["tz"])
    due = float(row["next_fire_at"])
    if row["catchup"] == "all":
        return Firing(due, cron.next_after(due), 0)
    latest = max(cron.latest_at_or_before(now) or due, due)
    passed = 1 + len(cron.slots(due, latest, MAX_COUNTED)) if latest > due else 1
    following = cron.next_after(now)
    if row["catchup"] == "none" and now - latest > MISFIRE_GRACE_S:
        return Firing(None, following, passed)
    return Firing(latest, following, passed - 1)


def check_run_id(run_id: object) -> str:
    """A manual run's id (a ULID from `dls.new_id()`): what makes its key, so letters and
    digits only."""
    if not isinstance(run_id, str) or not run_id.isalnum() or not 0 < len(run_id) <= 64:
        raise InvalidArgument(
            f"a schedule run's id must be 1 to 64 letters and digits (a ULID), got {run_id!r:.80}"
        )
    return run_id


def manual_key(name: str, run_id: str) -> str:
    """The idempotency key of a run outside the cron: `schedule:<name>:manual:<run id>`."""
    return f"schedule:{name}:manual:{run_id}"


def template_of(row: Row, key: str) -> SubmitRequest:
    """The submit a firing makes, from the row's stored template."""
    resources = row["resources"]
    return SubmitRequest(
        payload=bytes(row["payload"]),
        key=key,
        priority=float(row["priority"]),
        max_attempts=int(row["max_attempts"]),
        timeout_s=row["timeout_s"],
        resources=json.loads(resources) if resources is not None else None,
        max_preemptions=row["max_preemptions"],
    )


def schedule_info(row: Row) -> ScheduleInfo:
    resources = row["resources"]
    return ScheduleInfo(
        namespace=row["namespace"],
        name=row["name"],
        queue=row["queue"],
        cron=row["cron"],
        tz=row["tz"],
        catchup=row["catchup"],
        overlap=row["overlap"],
        state=row["state"],
        next_fire_at=row["next_fire_at"],
        last_fired_at=row["last_fired_at"],
        last_slot=row["last_slot"],
        last_job=row["last_job"],
        fired=int(row["fired"]),
        missed=int(row["missed"]),
        last_error=row["last_error"],
        priority=float(row["priority"]),
        max_attempts=int(row["max_attempts"]),
        timeout_s=row["timeout_s"],
        resources=json.loads(resources) if resources is not None else None,
        max_preemptions=row["max_preemptions"],
        created_at=float(row["created_at"]),
        updated_at=float(row["updated_at"]),
    )


__all__ = [
    "CATCHUP",
    "MISFIRE_GRACE_S",
    "OVERLAP",
    "SCHEDULE_STATES",
    "Firing",
    "ScheduleInfo",
    "check_schedule",
    "plan",
    "schedule_info",
    "template_of",
]
