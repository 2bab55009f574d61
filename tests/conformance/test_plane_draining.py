"""A worker that says it is draining has its waiting claim let go: that claim answers with
nothing at once, so a stopping daemon does not wait out its idle long-poll. Only that worker's
claim, and only until a worker registers under the name again."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

from planes import PlaneEnv, eventually

from dreamlake.lakeshore.types import Claim
from tests.support import claiming

#: Far longer than any check below waits: a claim that is not let go is still waiting.
LONG_POLL_S = 30.0


def _heartbeat_until_let_go(plane: PlaneEnv, worker_id: str, claim: Future[list[Claim]]) -> None:
    """Say "draining" until the claim returns: the first heartbeat may land before the claim
    sits down to wait, and a wait that begins after it is not let go (nothing remembers it)."""

    def let_go() -> bool:
        plane.dispatch.heartbeat(worker_id, {}, state="draining")
        return claim.done()

    eventually(let_go, timeout=10.0, every=0.05)


def _waiting_claim(
    pool: ThreadPoolExecutor, plane: PlaneEnv, queue: str, worker: str
) -> Future[list[Claim]]:
    return pool.submit(
        claiming.claim_many, plane.dispatch, [queue], worker=worker, wait_s=LONG_POLL_S
    )


def test_a_draining_workers_waiting_claim_answers_with_nothing_at_once(plane: PlaneEnv) -> None:
    q = plane.queue("drain-lp")
    worker = plane.dispatch.register_worker("drainer", queues=["drain-lp"])
    with ThreadPoolExecutor(2) as pool:
        mine = _waiting_claim(pool, plane, "drain-lp", "drainer")
        other = _waiting_claim(pool, plane, "drain-lp", "other")

        _heartbeat_until_let_go(plane, worker.id, mine)

        assert mine.result() == []
        assert not other.done()  # another worker's claim on the queue still waits for work
        job = q.submit("after the drain")
        assert [c.id for c in other.result(timeout=LONG_POLL_S)] == [job]
    assert plane.dispatch.worker(worker.id).state == "draining"


def test_a_worker_registered_again_under_the_name_waits_for_work_again(plane: PlaneEnv) -> None:
    q = plane.queue("drain-again")
    first = plane.dispatch.register_worker("again", queues=["drain-again"])
    with ThreadPoolExecutor(1) as pool:
        waiting = _waiting_claim(pool, plane, "drain-again", "again")
        _heartbeat_until_let_go(plane, first.id, waiting)
        assert waiting.result() == []

        plane.dispatch.register_worker("again", queues=["drain-again"])
        waiting = _waiting_claim(pool, plane, "drain-again", "again")
        job = q.submit("for the new worker")
        assert [c.id for c in waiting.result(timeout=LONG_POLL_S)] == [job]
