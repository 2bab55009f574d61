"""A worker that says it is draining has its waiting claim let go: that claim answers with
nothing at once, so a stopping daemon does not wait out its idle long-poll. Only that worker's
claim, and only until a worker registers under the name again."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

from planes import PlaneEnv, eventually

from tests.support import claiming

#: Far longer than any check below waits: a claim that is not let go is still waiting.
LONG_POLL_S = 30.0


def _heartbeat_until_let_go(plane: PlaneEnv, worker_id: str, claim: Future[object]) -> None:
    """Say "draining" until the claim returns: the first heartbeat may land before the claim
    sits down to wait, and a wait that begins after it is not let go (nothing remembers it)."""

    def let_go() -> bool:
        plane.dispatch.heartbeat(worker_id, {}, state="draining")
        return claim.done()

    eventually(let_go, timeout=10.0, every=0.05)


def test_a_draining_workers_waiting_claim_answers_with_nothing_at_once(plane: PlaneEnv) -> None:
    q = plane.queue("drain-lp")
    worker = plane.dispatch.register_worker("drainer", queues=["drain-lp"])
    with ThreadPoolExecutor(2) as pool:
        mine = pool.submit(
            claiming.claim_many, plane.dispatch, ["drain-lp"], worker="drainer", wait_s=LONG_POLL_S
        )
        other = pool.submit(
            claiming.claim_many, plane.dispatch, ["drain-lp"], worker="other", wait_s=LONG_POLL_S
        )

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
        waiting = pool.submit(
            claiming.claim_many, plane.dispatch, ["drain-again"], worker="again", wait_s=LONG_POLL_S
        )
        _heartbeat_until_let_go(plane, first.id, waiting)
        assert waiting.result() == []

        plane.dispatch.register_worker("again", queues=["drain-again"])
        waiting = pool.submit(
            claiming.claim_many, plane.dispatch, ["drain-again"], worker="again", wait_s=LONG_POLL_S
        )
        job = q.submit("for the new worker")
        assert [c.id for c in waiting.result(timeout=LONG_POLL_S)] == [job]
