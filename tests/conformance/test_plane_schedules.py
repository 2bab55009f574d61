"""Cron schedules on every plane (issue 36, item 3): made, listed, paused, resumed and removed
through the plane's API; fired by the store's firing on a clock the test holds, once per slot,
with catchup and overlap doing what the schedule says.

Firing runs on the store behind the plane (`on_store`: an HTTP plane's is its server's), at
times hours ahead of the real clock, so the servers' own sweepers, on the real clock, never
fire these slots themselves.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from planes import PlaneEnv

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import InvalidArgument, NotFound
from dreamlake.lakeshore.plane.cron import slot_key
from dreamlake.lakeshore.plane.schedules import ScheduleInfo

HOUR = 3600.0


def _make(plane: PlaneEnv, name: str, cron: str = "0 * * * *", **kw: Any) -> ScheduleInfo:
    kw.setdefault("queue", plane.queue("sched"))
    kw.setdefault("payload", {"run": name})
    return dls.schedule(name, cron, **kw)


def _fire(plane: PlaneEnv, now: float) -> None:
    plane.on_store(lambda store: store.fire_schedules(now=now))


def _keys(plane: PlaneEnv, queue: str = "sched") -> list[str]:
    rows = plane.dispatch.invocations(queue=queue, limit=500)
    return sorted(r.key for r in rows if r.key is not None)


def test_a_schedule_is_made_listed_shown_and_removed(plane: PlaneEnv) -> None:
    before = time.time()
    made = _make(plane, "hourly", tz="Europe/Berlin")
    assert (made.name, made.queue, made.cron, made.tz) == (
        "hourly",
        "sched",
        "0 * * * *",
        "Europe/Berlin",
    )
    assert (made.state, made.catchup, made.overlap, made.fired, made.missed) == (
        "active",
        "latest",
        "allow",
        0,
        0,
    )
    assert made.next_fire_at is not None and before < made.next_fire_at <= before + HOUR
    assert made.next_fire_at % HOUR == 0 and made.last_fired_at is None
    assert [s.name for s in plane.dispatch.schedules()] == ["hourly"]
    assert plane.dispatch.schedule("hourly") == made
    plane.dispatch.delete_schedule("hourly")
    assert plane.dispatch.schedules() == []
    with pytest.raises(NotFound, match="unknown schedule 'hourly'"):
        plane.dispatch.schedule("hourly")


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        ({"cron": "0 3 * *"}, "five fields"),
        ({"tz": "Mars/Olympus"}, "unknown time zone"),
        ({"catchup": "some"}, "catchup must be one of none|latest|all"),
        ({"overlap": "queue"}, "overlap must be one of allow|skip"),
        ({"name": "Nightly Eval"}, "invalid schedule name"),
        ({"cron": "0 0 30 2 *"}, "never fires"),
        ({"max_attempts": 0}, "max_attempts"),
    ],
)
def test_bad_input_is_refused_naming_what_is_allowed_and_nothing_is_stored(
    plane: PlaneEnv, kw: dict[str, Any], says: str
) -> None:
    kw = dict(kw)  # the parameters are shared by every plane's run
    name = kw.pop("name", "nightly")
    cron = kw.pop("cron", "0 3 * * *")
    with pytest.raises(InvalidArgument, match=says):
        _make(plane, name, cron, **kw)
    assert plane.dispatch.schedules() == []


def test_unknown_schedules_are_not_found(plane: PlaneEnv) -> None:
    for call in (
        lambda: plane.dispatch.schedule("nope"),
        lambda: plane.dispatch.set_schedule_state("nope", "pause"),
        lambda: plane.dispatch.delete_schedule("nope"),
    ):
        with pytest.raises(NotFound):
            call()


def test_each_slot_fires_once_with_its_key_and_the_job_it_was_given(plane: PlaneEnv) -> None:
    made = _make(plane, "hourly", priority=3, max_attempts=5)
    slot = made.next_fire_at
    assert slot is not None
    _fire(plane, slot - 1)  # not yet
    assert _keys(plane) == []
    for _ in range(3):  # firing again at the same time, or a moment later, adds nothing
        _fire(plane, slot + 5)
    assert _keys(plane) == [slot_key("hourly", slot)]
    row = plane.dispatch.schedule("hourly")
    assert (row.fired, row.missed, row.last_slot, row.next_fire_at) == (1, 0, slot, slot + HOUR)
    assert row.last_fired_at == slot + 5 and row.last_job is not None
    inv = plane.dispatch.invocation(row.last_job)
    assert (inv.priority, inv.max_attempts, inv.state) == (3.0, 5, "queued")
    job = plane.queue("sched").claim()
    assert job is not None and job.payload == {"run": "hourly"}


@pytest.mark.parametrize(
    ("catchup", "fired", "missed"), [("latest", 1, 4), ("all", 5, 0), ("none", 0, 5)]
)
def test_slots_missed_while_nothing_ran_follow_catchup(
    plane: PlaneEnv, catchup: str, fired: int, missed: int
) -> None:
    made = _make(plane, f"catch-{catchup}", catchup=catchup)
    first = made.next_fire_at
    assert first is not None
    # Nothing ran through five slots; the first firing comes well after the fifth
    _fire(plane, first + 4 * HOUR + 600)
    _fire(plane, first + 4 * HOUR + 601)  # whatever a next sweep adds
    row = plane.dispatch.schedule(f"catch-{catchup}")
    assert (row.fired, row.missed) == (fired, missed)
    assert row.next_fire_at == first + 5 * HOUR
    expected = {
        "latest": [first + 4 * HOUR],
        "all": [first + i * HOUR for i in range(5)],
        "none": [],
    }[catchup]
    assert _keys(plane) == sorted(slot_key(row.name, s) for s in expected)


def test_catchup_none_still_fires_a_slot_a_sweep_late(plane: PlaneEnv) -> None:
    made = _make(plane, "prompt", catchup="none")
    assert made.next_fire_at is not None
    _fire(plane, made.next_fire_at + 30)
    assert plane.dispatch.schedule("prompt").fired == 1


def test_overlap_skip_passes_slots_while_the_last_job_is_live(plane: PlaneEnv) -> None:
    made = _make(plane, "single", overlap="skip")
    first = made.next_fire_at
    assert first is not None
    _fire(plane, first + 1)
    _fire(plane, first + HOUR + 1)  # the first job is still queued: skipped
    row = plane.dispatch.schedule("single")
    assert (row.fired, row.missed) == (1, 1)
    assert row.last_error is not None and "overlap: skip" in row.last_error
    job = plane.queue("sched").claim()
    assert job is not None
    plane.queue("sched").ack(job, "done")
    _fire(plane, first + 2 * HOUR + 1)  # ended: the next slot fires
    assert plane.dispatch.schedule("single").fired == 2
    assert len(_keys(plane)) == 2


def test_a_paused_schedule_fires_nothing_and_resumes_from_the_next_slot(plane: PlaneEnv) -> None:
    made = _make(plane, "pausable")
    first = made.next_fire_at
    assert first is not None
    assert plane.dispatch.set_schedule_state("pausable", "pause").state == "paused"
    _fire(plane, first + 3 * HOUR)
    assert _keys(plane) == []
    resumed = plane.dispatch.set_schedule_state("pausable", "resume")
    # the paused span does not burst on resume: the next slot is after now, nothing missed
    assert resumed.state == "active" and resumed.missed == 0
    assert resumed.next_fire_at is not None and resumed.next_fire_at > time.time()
    with pytest.raises(InvalidArgument, match=r"pause\|resume"):
        plane.dispatch.set_schedule_state("pausable", "stop")


def test_a_catchup_all_schedule_fires_the_paused_span_on_resume(plane: PlaneEnv) -> None:
    made = _make(plane, "backfill", catchup="all")
    first = made.next_fire_at
    assert first is not None
    plane.dispatch.set_schedule_state("backfill", "pause")
    assert plane.dispatch.set_schedule_state("backfill", "resume").next_fire_at == first
    _fire(plane, first + 2 * HOUR + 1)
    assert plane.dispatch.schedule("backfill").fired == 3


def test_putting_again_replaces_the_job_and_keeps_state_and_counts(plane: PlaneEnv) -> None:
    made = _make(plane, "deployed")
    assert made.next_fire_at is not None
    _fire(plane, made.next_fire_at + 1)
    plane.dispatch.set_schedule_state("deployed", "pause")
    again = _make(plane, "deployed", payload={"run": "v2"}, priority=7)
    assert (again.state, again.fired, again.priority) == ("paused", 1, 7.0)
    assert again.next_fire_at == made.next_fire_at + HOUR  # same cron: the same next slot
    moved = _make(plane, "deployed", cron="30 * * * *")
    assert moved.next_fire_at is not None and moved.next_fire_at % HOUR == 1800


def test_a_thunk_schedule_fires_the_call_it_was_given(plane: PlaneEnv) -> None:
    made = _make(plane, "thunked", payload=dls.thunk(pow, 2, 10))
    assert made.next_fire_at is not None
    _fire(plane, made.next_fire_at + 1)
    job = plane.queue("sched").claim()
    assert job is not None
    assert (job.payload.kind, job.payload.fn, job.payload.args) == ("thunk", pow, (2, 10))


def test_a_schedule_refuses_what_belongs_to_one_job(plane: PlaneEnv) -> None:
    from dreamlake.lakeshore.types import SubmitRequest

    for field, value in (("key", "k"), ("delay_s", 5.0), ("map_id", "M1")):
        template = SubmitRequest(dls.encode(1), **{field: value})  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match=f"takes no {field}"):
            plane.dispatch.put_schedule("one", cron="@daily", queue="sched", template=template)
    assert plane.dispatch.schedules() == []


def test_run_now_submits_the_job_at_once_and_leaves_the_cron_alone(plane: PlaneEnv) -> None:
    """`lakeshore schedules run-now` / `POST .../schedules/{name}/run` (issue 36 item 6)."""
    made = _make(plane, "on-demand", priority=2)
    plane.dispatch.set_schedule_state("on-demand", "pause")  # a paused schedule runs too
    run_id = dls.new_id()
    job = plane.dispatch.run_schedule("on-demand", run_id)
    assert plane.dispatch.run_schedule("on-demand", run_id) == job  # sent again: the same job
    other = plane.dispatch.run_schedule("on-demand")
    assert other != job
    inv = plane.dispatch.invocation(job)
    assert (inv.key, inv.state, inv.priority) == (
        f"schedule:on-demand:manual:{run_id}",
        "queued",
        2.0,
    )
    row = plane.dispatch.schedule("on-demand")
    assert (row.next_fire_at, row.fired, row.missed, row.last_job) == (
        made.next_fire_at,
        0,
        0,
        None,
    )
    claimed = plane.queue("sched").claim()
    assert claimed is not None and claimed.payload == {"run": "on-demand"}
    with pytest.raises(NotFound, match="unknown schedule 'nope'"):
        plane.dispatch.run_schedule("nope")
    with pytest.raises(InvalidArgument, match="letters and digits"):
        plane.dispatch.run_schedule("on-demand", "not/a-ulid")
    assert len(_keys(plane)) == 2
