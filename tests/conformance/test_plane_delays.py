"""Delays on every plane (issue 36, item 2): a delayed job is durable at once as `scheduled`,
counted, listed and cancellable; no claim returns it before its time; a claim waiting on its
queue takes it when it comes due; the same key sent again returns the same job, due when it was.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest
from planes import PlaneEnv

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.types import SubmitRequest
from tests.support import claiming


def test_a_delayed_job_is_scheduled_and_no_claim_takes_it_early(plane: PlaneEnv) -> None:
    q = plane.queue("later")
    held = q.submit({"n": 1}, delay_s=3600)
    now = q.submit({"n": 2})
    assert plane.dispatch.invocation(held).state == "scheduled"
    assert q.count("scheduled") == 1 and q.count("queued") == 1
    assert [r.id for r in plane.dispatch.invocations(state="scheduled")] == [held]
    job = q.claim()
    assert job is not None and job.id == now
    assert q.claim() is None
    many = claiming.claim_many(plane.dispatch, ["later"], worker="w", limit=10)
    assert many == []


def test_a_waiting_claim_takes_the_job_when_it_comes_due(plane: PlaneEnv) -> None:
    q = plane.queue("soon")
    inv = q.submit("x", delay_s=0.3)
    assert q.claim() is None
    job = q.claim(wait=20)
    assert job is not None and job.id == inv
    assert plane.dispatch.invocation(inv).state == "running"


def test_due_jobs_are_claimed_in_queue_order(plane: PlaneEnv) -> None:
    q = plane.queue("order")
    due = time.time() + 0.3  # both due at once: the higher priority goes first
    low = q.submit("low", at=due)
    high = q.submit("high", at=due, priority=5)
    first = q.claim(wait=20)
    second = q.claim(wait=20)
    assert first is not None and second is not None
    assert [first.id, second.id] == [high, low]


def test_the_same_key_returns_the_same_job_still_due_when_it_was(plane: PlaneEnv) -> None:
    q = plane.queue("keyed")
    inv = q.submit("x", key="nightly", delay_s=3600)
    assert q.submit("x", key="nightly", delay_s=0) == inv
    assert plane.dispatch.invocation(inv).state == "scheduled"
    assert q.claim() is None


def test_a_scheduled_job_is_cancelled_like_a_queued_one(plane: PlaneEnv) -> None:
    q = plane.queue("cancel-later")
    inv = q.submit("x", at=dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1))
    assert q.cancel(inv)
    inv_row = plane.dispatch.invocation(inv)
    assert inv_row.state == "cancelled" and inv_row.terminal
    assert q.count("scheduled") == 0


def test_a_time_already_past_queues_at_once(plane: PlaneEnv) -> None:
    q = plane.queue("past")
    inv = q.submit("x", at=time.time() - 60)
    assert plane.dispatch.invocation(inv).state == "queued"
    naive_past = dt.datetime.utcnow() - dt.timedelta(minutes=1)  # naive: read as UTC
    assert plane.dispatch.invocation(q.submit("y", at=naive_past)).state == "queued"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"delay_s": -1.0}, "delay_s must be"),
        ({"delay_s": 1e12}, "delay_s must be"),
        ({"delay_s": 1.0, "at": time.time() + 5}, "not both"),
        ({"at": time.time() + 10 * 366 * 86400}, "more than a year ahead"),
    ],
)
def test_a_bad_delay_is_refused_and_changes_nothing(
    plane: PlaneEnv, fields: dict[str, float], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        plane.dispatch.submit("bad-delay", [SubmitRequest(payload=b"\xc0", **fields)])  # type: ignore[arg-type]
    assert plane.dispatch.count("bad-delay", "scheduled") == 0
    assert plane.dispatch.count("bad-delay", "queued") == 0
