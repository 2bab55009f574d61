"""Batch verbs: claim_many and ack_many, one durable write for many jobs (what daemons use)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from planes import PlaneEnv

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import InvalidArgument, LeaseLost, NotFound
from dreamlake.lakeshore.types import Ack, Claim
from tests.support import claiming


def test_claim_many_takes_up_to_limit_in_queue_order_each_fenced_on_its_own(
    plane: PlaneEnv,
) -> None:
    q = plane.queue("batch")
    ids = q.submit_many(list(range(5)))

    got = claiming.claim_many(plane.dispatch, ["batch"], worker="w", limit=3)

    assert [c.id for c in got] == ids[:3]
    assert all(c.attempt == 1 and c.queue == "batch" and c.lease for c in got)
    assert q.count("running") == 3 and q.count("queued") == 2
    plane.dispatch.ack(got[1].id, got[1].lease, dls.encode("one"))
    assert [q.status(c.id).state for c in got] == ["running", "succeeded", "running"]
    rest = claiming.claim_many(plane.dispatch, ["batch"], worker="w", limit=10)
    assert [c.id for c in rest] == ids[3:]


def test_claim_many_over_several_queues_keeps_each_queues_order(plane: PlaneEnv) -> None:
    a = plane.queue("batch-a").submit_many(["a0", "a1"])
    b = plane.queue("batch-b").submit_many(["b0", "b1"])

    got = claiming.claim_many(plane.dispatch, ["batch-a", "batch-b"], worker="w", limit=10)

    assert sorted(c.id for c in got) == sorted(a + b)
    order = [c.id for c in got]
    assert order.index(a[0]) < order.index(a[1]) and order.index(b[0]) < order.index(b[1])


def test_claim_many_honours_priority_like_single_claims(plane: PlaneEnv) -> None:
    q = plane.queue("batch-prio", kind="priority")
    low = q.submit("low", priority=1)
    high = q.submit("high", priority=9)

    got = claiming.claim_many(plane.dispatch, ["batch-prio"], worker="w", limit=2)

    assert [c.id for c in got] == [high, low]


def test_claim_many_on_an_empty_queue_waits_then_returns_nothing(plane: PlaneEnv) -> None:
    started = time.monotonic()

    assert claiming.claim_many(plane.dispatch, ["batch"], worker="w", limit=4, wait_s=0.2) == []
    assert time.monotonic() - started >= 0.19


@pytest.mark.parametrize("limit", [0, -1, 1001])
def test_claim_many_refuses_a_limit_out_of_range(plane: PlaneEnv, limit: int) -> None:
    q = plane.queue("batch")
    q.submit(1)

    with pytest.raises(InvalidArgument, match=r"1 to 1000|\[1, 1000\]"):
        claiming.claim_many(plane.dispatch, ["batch"], worker="w", limit=limit)
    assert q.count("queued") == 1


def test_ack_many_settles_each_and_refuses_only_the_bad_ones(plane: PlaneEnv) -> None:
    q = plane.queue("batch")
    ids = q.submit_many(["a", "b", "c"])
    a, b, c = claiming.claim_many(plane.dispatch, ["batch"], worker="w", limit=3)
    ghost = "01J00000000000000000000000"

    errors = plane.dispatch.ack_many(
        [
            Ack(a.id, a.lease, dls.encode("A")),
            Ack(b.id, "f" * 32, dls.encode("forged")),
            Ack(ghost, "f" * 32, None),
            Ack(c.id, c.lease, dls.encode("C")),
        ]
    )

    assert errors[0] is None and errors[3] is None
    assert isinstance(errors[1], LeaseLost)
    assert isinstance(errors[2], NotFound) and ghost in str(errors[2])
    assert q.result(ids[0], timeout=1) == "A" and q.result(ids[2], timeout=1) == "C"
    assert q.status(ids[1]).state == "running"  # the forged ack changed nothing


def test_ack_many_repeated_is_idempotent(plane: PlaneEnv) -> None:
    q = plane.queue("batch")
    inv = q.submit(1)
    (job,) = claiming.claim_many(plane.dispatch, ["batch"], worker="w", limit=1)
    acks = [Ack(job.id, job.lease, dls.encode("once"))]

    assert plane.dispatch.ack_many(acks) == [None]
    assert plane.dispatch.ack_many(acks) == [None]  # a lost answer, sent again
    assert q.result(inv, timeout=1) == "once"


def test_ack_many_of_nothing_is_nothing(plane: PlaneEnv) -> None:
    assert plane.dispatch.ack_many([]) == []


def test_batches_and_single_claims_share_a_queue_exactly_once(plane: PlaneEnv) -> None:
    q = plane.queue("batch")
    ids = set(q.submit_many([{"op": "double", "x": i} for i in range(60)]))

    with plane.extra_peers(1) as peers:
        pending = peers[0].start("serve", queue="batch", n=60, wait=0.5)
        local = 0
        while got := claiming.claim_many(plane.dispatch, ["batch"], worker="w", limit=7):
            acks = [Ack(c.id, c.lease, None) for c in got]
            assert plane.dispatch.ack_many(acks) == [None] * len(got)
            local += len(got)
        served = pending.result()

    assert local + served == 60
    assert q.count("succeeded") == 60
    assert {plane.dispatch.invocation(i).attempt for i in ids} == {1}


# -- ack_and_claim: a worker's one call per job ------------------------------------------------


def test_ack_and_claim_settles_the_finished_job_and_takes_the_next(plane: PlaneEnv) -> None:
    q = plane.queue("batch")
    first, second = q.submit_many(["a", "b"])
    (job,) = claiming.claim_many(plane.dispatch, ["batch"], worker="w", limit=1)

    errors, got = claiming.ack_and_claim(
        plane.dispatch, [Ack(job.id, job.lease, dls.encode("A"))], ["batch"], worker="w", limit=1
    )

    assert errors == [None]
    assert [c.id for c in got] == [second] and got[0].lease and got[0].attempt == 1
    assert q.result(first, timeout=1) == "A"
    assert q.status(second).state == "running"


def test_ack_and_claim_refuses_only_the_bad_acks_and_still_claims(plane: PlaneEnv) -> None:
    q = plane.queue("batch")
    first, second = q.submit_many(["a", "b"])
    (job,) = claiming.claim_many(plane.dispatch, ["batch"], worker="w", limit=1)
    ghost = "01J00000000000000000000000"

    errors, got = claiming.ack_and_claim(
        plane.dispatch,
        [Ack(job.id, "f" * 32, dls.encode("forged")), Ack(ghost, "f" * 32, None)],
        ["batch"],
        worker="w",
        limit=1,
    )

    assert isinstance(errors[0], LeaseLost)
    assert isinstance(errors[1], NotFound) and ghost in str(errors[1])
    assert [c.id for c in got] == [second]
    assert q.status(first).state == "running"  # the forged ack changed nothing


def test_ack_and_claim_repeated_is_idempotent(plane: PlaneEnv) -> None:
    q = plane.queue("batch")
    inv = q.submit(1)
    (job,) = claiming.claim_many(plane.dispatch, ["batch"], worker="w", limit=1)
    acks = [Ack(job.id, job.lease, dls.encode("once"))]

    assert claiming.ack_and_claim(plane.dispatch, acks, ["batch"], worker="w", limit=1) == (
        [None],
        [],
    )
    assert plane.dispatch.ack_many(acks) == [None]  # its answer lost: sent again on its own
    assert q.result(inv, timeout=1) == "once"


def test_ack_and_claim_commits_the_acks_before_it_waits(plane: PlaneEnv) -> None:
    q = plane.queue("batch")
    done = q.submit("done")
    (job,) = claiming.claim_many(plane.dispatch, ["batch"], worker="w", limit=1)
    answer: list[tuple[list[Any], list[Claim]]] = []
    waiting = threading.Thread(
        target=lambda: answer.append(
            claiming.ack_and_claim(
                plane.dispatch,
                [Ack(job.id, job.lease, dls.encode("D"))],
                ["batch"],
                worker="w",
                limit=1,
                wait_s=30,
            )
        )
    )
    waiting.start()
    try:
        # The result is readable while the claim still waits for a job.
        assert q.result(done, timeout=10) == "D"
        assert waiting.is_alive()
        later = q.submit("later")
    finally:
        waiting.join(30)
    assert not waiting.is_alive()
    ((errors, got),) = answer
    assert errors == [None] and [c.id for c in got] == [later]


def test_ack_and_claim_of_no_acks_is_a_claim(plane: PlaneEnv) -> None:
    inv = plane.queue("batch").submit(1)

    assert (
        claiming.ack_and_claim(plane.dispatch, [], ["batch"], worker="w", limit=1)[1][0].id == inv
    )
    assert claiming.ack_and_claim(plane.dispatch, [], ["batch"], worker="w", limit=1) == ([], [])
