"""The daemon's ack batching: batches bounded by count and bytes, a flush that waits, and
acks that ride on the next claim."""

from __future__ import annotations

import operator
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore import worker as worker_module
from dreamlake.lakeshore.errors import DispatchError, Unavailable
from dreamlake.lakeshore.types import Ack, Claim
from dreamlake.lakeshore.work import acks as acks_module
from dreamlake.lakeshore.work.acks import MAX_ACK_BYTES, MAX_ACKS, AckQueue


def _claim(i: int) -> Claim:
    return Claim(f"id{i}", "default", "q", b"", 1, f"lease{i}", 0.0, None)


def test_a_batch_takes_everything_waiting_up_to_the_count_limit() -> None:
    acks = AckQueue()
    for i in range(MAX_ACKS + 3):
        acks.put(_claim(i), b"r")

    first, second = acks.take(), acks.take()

    assert first is not None and second is not None
    assert [a.id for _, a in first] == [f"id{i}" for i in range(MAX_ACKS)]
    assert [a.id for _, a in second] == [f"id{i}" for i in range(MAX_ACKS, MAX_ACKS + 3)]
    assert first[0][1].lease == "lease0" and first[0][1].result == b"r"


def test_a_batch_stops_before_the_byte_limit_but_a_big_result_still_goes_alone() -> None:
    acks = AckQueue()
    big = b"x" * (MAX_ACK_BYTES // 2 + 1)
    acks.put(_claim(0), big)
    acks.put(_claim(1), big)
    acks.put(_claim(2), b"x" * (MAX_ACK_BYTES + 1))

    sizes = []
    while len(sizes) < 3 and (batch := acks.take()) is not None:
        sizes.append([len(a.result or b"") for _, a in batch])

    assert sizes == [[len(big)], [len(big)], [MAX_ACK_BYTES + 1]]


def test_wait_idle_returns_only_once_the_taken_batch_is_done() -> None:
    acks = AckQueue()
    acks.put(_claim(0), None)
    batch = acks.take()
    assert batch is not None

    assert not acks.wait_idle(0.05)  # taken but not yet sent
    acks.done(batch)
    assert acks.wait_idle(0.05)


def test_take_all_waits_for_the_batch_in_flight_and_takes_every_ack_left() -> None:
    """A GPU daemon's claim settles first: the batch the sender has on its way commits before
    the claim, and everything still waiting rides on it."""
    acks = AckQueue()
    acks.put(_claim(0), None)
    in_flight = acks.take()
    assert in_flight is not None
    acks.put(_claim(1), None)
    acks.put(_claim(2), None)
    taken: list[list[str]] = []
    claimer = threading.Thread(
        target=lambda: taken.append([a.id for _, a in acks.take_all(10.0)]), daemon=True
    )
    claimer.start()
    claimer.join(0.1)
    assert claimer.is_alive() and taken == []  # it waits for id0's batch to commit
    acks.done(in_flight)
    claimer.join(10)
    assert taken == [["id1", "id2"]]
    assert not acks.wait_idle(0.05)  # the riders are in flight until the claim is sent


def test_close_ends_the_sender_after_the_queue_empties() -> None:
    acks = AckQueue()
    acks.put(_claim(0), None)
    taken: list[int] = []

    def sender() -> None:
        while (batch := acks.take()) is not None:
            taken.append(len(batch))
            acks.done(batch)

    thread = threading.Thread(target=sender)
    thread.start()
    acks.close()
    thread.join(5)

    assert not thread.is_alive() and taken == [1]


def test_a_busy_daemon_lets_a_batch_gather_company_and_an_idle_one_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(acks_module, "ACK_LINGER_S", 60.0)  # only company ends the wait here
    acks = AckQueue()
    acks.put(_claim(0), None)
    threading.Timer(0.01, acks.put, args=(_claim(1), None)).start()

    # Busy while fewer than two wait: the batch holds for the second one, then goes.
    busy = acks.take(busy=lambda: len(acks._items) < 2)
    assert busy is not None and [a.id for _, a in busy] == ["id0", "id1"]

    acks.put(_claim(2), None)
    idle = acks.take(busy=lambda: False)  # nothing else running: at once
    assert idle is not None and [a.id for _, a in idle] == ["id2"]


# -- riding: a success waits for the claim loop, which sends it with its claim -----------------


def test_while_riding_a_success_goes_to_the_claim_loop_not_the_sender() -> None:
    acks = AckQueue()
    acks.riding(True)
    acks.put(_claim(0), b"r")

    assert not acks._items  # the sending thread would find nothing
    riders = acks.take_riders()
    assert [a.id for _, a in riders] == ["id0"]
    assert not acks.wait_idle(0.01)  # taken, not yet sent
    acks.done(riders)
    assert acks.wait_idle(0.01)


def test_a_batch_that_rode_on_a_claim_never_wakes_the_sender() -> None:
    acks = AckQueue()
    sender = threading.Thread(target=acks.take)
    sender.start()
    waiting = acks._cond._waiters  # type: ignore[attr-defined]  # CPython's waiter locks
    deadline = time.monotonic() + 5
    while not waiting:  # until the sender waits for acks
        assert time.monotonic() < deadline, "the sender never waited"
        time.sleep(0.001)
    (asleep,) = waiting

    acks.riding(True)
    acks.put(_claim(0), b"r")
    riders = acks.take_riders()
    acks.done(riders)  # sent with the claim

    assert acks.wait_idle(1.0)
    # Still the same wait: a notify would have taken its lock out of the list (a sender woken
    # per job for nothing was the daemon's waste), and a wait again would be a new lock.
    assert list(waiting) == [asleep]
    acks.close()
    sender.join(5)
    assert not sender.is_alive()


def test_riders_not_taken_and_a_failed_claims_riders_go_back_to_the_sender() -> None:
    acks = AckQueue()
    acks.riding(True)
    acks.put(_claim(0), None)
    taken = acks.take_riders()
    acks.put(_claim(1), None)

    acks.unride(taken)  # the claim carrying id0 failed; id1 was never taken
    acks.done(taken)
    acks.put(_claim(2), None)  # no longer riding

    batch = acks.take()
    assert batch is not None and [a.id for _, a in batch] == ["id0", "id1", "id2"]


def test_close_hands_every_rider_to_the_sender() -> None:
    acks = AckQueue()
    acks.riding(True)
    acks.put(_claim(0), None)
    acks.close()

    batch = acks.take()
    assert batch is not None and [a.id for _, a in batch] == ["id0"]
    acks.done(batch)
    assert acks.take() is None and acks.wait_idle(0.01)


class CountingPlane:
    """A plane that counts how finished jobs reach it; `ack_and_claim` fails when told to."""

    def __init__(self, inner: dls.Dispatch, fail_rides: int = 0) -> None:
        self.inner = inner
        self.namespace = inner.namespace
        self.ack_many_calls = 0
        self.rode: list[str] = []
        self.fail_rides = fail_rides

    def ack_many(self, acks: Sequence[Ack]) -> list[DispatchError | None]:
        self.ack_many_calls += 1
        return self.inner.ack_many(acks)

    def ack_and_claim(
        self, acks: Sequence[Ack], *args: Any, **kw: Any
    ) -> tuple[list[DispatchError | None], list[Claim]]:
        if self.fail_rides:
            self.fail_rides -= 1
            raise Unavailable("the plane is restarting")
        self.rode += [a.id for a in acks]
        return self.inner.ack_and_claim(acks, *args, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _serve(plane: CountingPlane, calls: int) -> list[str]:
    """`calls` jobs one after another through run_worker on `plane`: their ids."""
    q = dls.SyncQueue("riding", dispatch=plane.inner)
    stop = threading.Event()
    worker = threading.Thread(
        target=dls.run_worker, args=(plane, ["riding"]), kwargs={"stop": stop}
    )
    worker.start()
    try:
        ids = []
        for i in range(calls):
            inv = q.submit(dls.thunk(operator.add, i, 1))
            assert q.result(inv, timeout=30) == i + 1
            ids.append(inv)
    finally:
        stop.set()
        worker.join(30)
    assert not worker.is_alive()
    return ids


def test_a_worker_sends_each_finished_job_with_its_next_claim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker_module, "CLAIM_WAIT_S", 0.05)
    with dls.Dispatch(":memory:") as inner:
        plane = CountingPlane(inner)
        ids = _serve(plane, 20)

    # Every ack but those the stop flushed rode on a claim: one call per job, not two.
    assert set(plane.rode) <= set(ids) and len(plane.rode) >= 18
    assert plane.ack_many_calls <= 2


def test_acks_whose_claim_failed_are_sent_on_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_module, "CLAIM_WAIT_S", 0.05)
    with dls.Dispatch(":memory:") as inner:
        plane = CountingPlane(inner, fail_rides=3)
        ids = _serve(plane, 6)  # each result arrived: no ack was lost with its claim
        states = {inner.invocation(i).state for i in ids}

    assert states == {"succeeded"}
    assert plane.ack_many_calls >= 1 and plane.fail_rides == 0
