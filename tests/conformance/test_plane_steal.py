"""Shared pools on every plane: a worker takes a job of a queue that is not its primary only once
the job has waited that queue's `steal_delay_s` (sdk/plane/steal.py), on every path that gives a
worker a job: a claim, a batch for its prefetch, the claim an ack carries, and a claim held
while it waits, which a submit (on a server: in its own transaction) hands its jobs to.

The worker is the peer (a second process on the multi-process planes) on `pool-a` and `pool-b`,
`pool-a` first. A delay is either long (the outcome inside it is certain) or short and waited
out; the row's `created_at` and `started_at` then say how long the job waited.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from planes import PlaneEnv, eventually

LONG_S = 60.0
PAIR = ["pool-a", "pool-b"]


def pool(plane: PlaneEnv, delay: float, *, kind: str = "fifo") -> None:
    """`pool-a` and `pool-b`, one pool, both stolen from only after `delay`."""
    for name in PAIR:
        elasticity = {"kind": "elastic", "min": 0, "max": 2, "pool": "mixed"}
        plane.dispatch.create_queue(
            name, kind=kind, elasticity={**elasticity, "steal_delay_s": delay}
        )


def submit(plane: PlaneEnv, queue: str, tag: str = "") -> str:
    return plane.queue(queue).submit(tag or queue)


def running_job(plane: PlaneEnv) -> dict[str, Any]:
    """A job the peer claimed from its primary, as `{id, lease}` for an ack to carry."""
    submit(plane, "pool-a", "warm-up")
    job = plane.peer.claim("pool-a")
    assert job is not None
    return {"id": job.id, "lease": job.lease}


def waiting_claim(plane: PlaneEnv, limit: int) -> Any:
    """The peer acks a job and, with the same call, claims and waits for more: once the ack is
    seen committed, its claim waits (on a server, in the seat a submit hands its jobs to)."""
    ack = running_job(plane)
    pending = plane.peer.start("ack_and_claim", acks=[ack], queues=PAIR, limit=limit, wait=20.0)
    eventually(lambda: plane.dispatch.invocation(ack["id"]).state == "succeeded")
    return pending


@pytest.mark.parametrize("limit", [1, 4])
@pytest.mark.parametrize("path", ["claim_many", "ack_and_claim"])
def test_a_fresh_job_of_another_primary_is_left_to_its_own_workers(
    plane: PlaneEnv, path: str, limit: int
) -> None:
    pool(plane, LONG_S)
    acks = [running_job(plane)] if path == "ack_and_claim" else []
    stolen = submit(plane, "pool-b")
    own = [submit(plane, "pool-a", f"a{i}") for i in range(2)]

    args: dict[str, Any] = {"queues": PAIR, "limit": limit}
    got = plane.peer.call(path, **args, **({"acks": acks} if acks else {}))

    assert got == own[:limit]
    assert plane.peer.call("claim_many", queues=PAIR, limit=limit) == own[limit:]
    assert plane.dispatch.invocation(stolen).state == "queued"
    # A worker whose primary is pool-b takes it at once.
    assert plane.peer.call("claim_many", queues=["pool-b", "pool-a"]) == [stolen]


@pytest.mark.parametrize("limit", [1, 4])
def test_a_waiting_claim_is_not_handed_a_job_it_may_not_steal_yet(
    plane: PlaneEnv, limit: int
) -> None:
    """The issue's repro: a pool worker warmed up on pool-a; then a job to pool-b, then one to
    pool-a. The waiting claim gets pool-a's; pool-b's waits for its own workers."""
    pool(plane, LONG_S)
    waiting = waiting_claim(plane, limit)

    stolen = submit(plane, "pool-b")
    own = submit(plane, "pool-a")

    assert waiting.result() == [own]
    assert plane.dispatch.invocation(stolen).state == "queued"


def test_a_waiting_claim_takes_jobs_in_its_primary_queues_order(plane: PlaneEnv) -> None:
    """Jobs submitted to a queue that sets no delay go to the waiting claim at once, in the
    order of the claimer's primary (filo here), whichever queue they came to."""
    plane.dispatch.create_queue("pool-a", kind="filo")
    plane.dispatch.create_queue("pool-b", kind="fifo")
    waiting = waiting_claim(plane, 1)

    older, newer = plane.queue("pool-b").submit_many(["older", "newer"])

    assert waiting.result() == [newer]
    assert plane.dispatch.invocation(older).state == "queued"


def test_a_job_that_has_waited_its_delay_goes_to_any_pool_worker(plane: PlaneEnv) -> None:
    delay = 0.3
    pool(plane, delay)
    stolen = submit(plane, "pool-b")

    # Nothing is committed when the delay ends: there is no wake-up to wait on, so poll.
    assert eventually(lambda: plane.peer.call("claim_many", queues=PAIR)) == [stolen]

    row = plane.dispatch.invocation(stolen)
    assert row.state == "running" and row.started_at is not None
    assert row.started_at - row.created_at >= delay


@pytest.mark.parametrize("kind", ["fifo", "filo", "boltzmann"])
def test_a_batch_takes_its_own_queues_jobs_first_then_the_aged_ones(
    plane: PlaneEnv, kind: str
) -> None:
    delay = 0.3
    pool(plane, delay, kind=kind)
    aged = submit(plane, "pool-b", "aged")
    created = plane.dispatch.invocation(aged).created_at
    eventually(lambda: time.time() - created > delay)  # aged: no wake-up says so, so poll
    fresh = submit(plane, "pool-b", "fresh")
    own = {submit(plane, "pool-a", f"a{i}") for i in range(2)}

    got = plane.peer.call("claim_many", queues=PAIR, limit=4)

    assert set(got[:2]) == own and got[2:3] == [aged]  # its own first, then the oldest aged
    assert got[3:] in ([], [fresh])  # fresh only if it too had aged by the claim (a slow box)
    for stolen in got[2:]:
        row = plane.dispatch.invocation(stolen)
        assert row.started_at is not None and row.started_at - row.created_at >= delay
