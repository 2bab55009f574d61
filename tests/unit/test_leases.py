"""When the worker renews its leases (sdk/work/leases.py): the schedule alone, on given clocks."""

from __future__ import annotations

import pytest

from dreamlake.lakeshore.work.leases import KILL_POLL_S, RenewalSchedule


def test_a_renewal_is_due_a_third_of_the_lease_after_the_last_answered_one_was_sent() -> None:
    schedule = RenewalSchedule(1.5, now=0.0)
    assert schedule.wait_s(0.0) == pytest.approx(0.5)
    schedule.answered(sent_at=10.0)
    # How long the answer took does not push the next renewal back: it counts from the send.
    assert schedule.wait_s(10.1) == pytest.approx(0.4)
    assert schedule.wait_s(10.4) == pytest.approx(0.1)


def test_a_slow_answer_is_followed_by_the_next_renewal_at_once() -> None:
    schedule = RenewalSchedule(1.5, now=0.0)
    schedule.answered(sent_at=10.0)
    assert schedule.wait_s(10.7) == 0.0  # answered 0.7 s after it was sent
    assert schedule.slow(0.7)  # and more than a third of the lease went on waiting for it
    assert not schedule.slow(0.4)


def test_a_long_lease_is_still_renewed_every_kill_poll_for_its_kill_requests() -> None:
    schedule = RenewalSchedule(60.0, now=0.0)
    schedule.answered(sent_at=5.0)
    assert schedule.wait_s(5.0) == pytest.approx(KILL_POLL_S)


def test_a_failed_renewal_is_tried_again_soon_backing_off_to_the_period() -> None:
    schedule = RenewalSchedule(1.5, now=0.0)
    waits = []
    for _ in range(5):
        schedule.failed(now=20.0)
        waits.append(schedule.wait_s(20.0))
    assert waits == pytest.approx([0.0625, 0.125, 0.25, 0.5, 0.5])
    schedule.answered(sent_at=21.0)
    schedule.failed(now=21.5)
    assert schedule.wait_s(21.5) == pytest.approx(0.0625)  # an answer resets the backoff
