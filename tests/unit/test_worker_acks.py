"""The daemon's ack batching: batches bounded by count and bytes, and a flush that waits."""

from __future__ import annotations

import threading

import pytest

from dreamlake.lakeshore.types import Claim
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
