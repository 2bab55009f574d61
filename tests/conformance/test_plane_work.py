"""Worker verbs: claim, ack, nack, working, post, release, renew; fencing, leases, retries."""

from __future__ import annotations

import os
import time

import pytest
from planes import PlaneEnv, eventually

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import (
    Conflict,
    DispatchError,
    InvalidArgument,
    LeaseLost,
    NotFound,
)
from tests.support import claiming


def test_a_multiprocess_plane_really_has_a_second_process(plane: PlaneEnv) -> None:
    peer_pid = plane.peer.call("pid")

    assert (peer_pid != os.getpid()) is plane.multiprocess


def test_claim_on_an_empty_queue_is_none(plane: PlaneEnv) -> None:
    assert plane.queue("gpu").claim() is None
    assert plane.peer.claim("gpu") is None


def test_claim_returns_the_job_fields_and_marks_it_running(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit({"x": [1, 2]})

    job = plane.peer.claim("gpu")

    assert job is not None
    assert job.id == inv and job.payload == {"x": [1, 2]}
    assert job.attempt == 1 and job.queue == "gpu" and job.lease
    status = q.status(inv)
    assert status.state == "running" and status.attempt == 1 and status.started_at
    assert q.count("queued") == 0 and q.count("running") == 1


def test_claim_only_takes_from_its_own_queue(plane: PlaneEnv) -> None:
    plane.queue("alpha").submit(1)

    assert plane.queue("beta").claim() is None
    assert plane.queue("alpha").claim() is not None


def test_claim_with_wait_is_woken_by_a_submit_from_the_other_process(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    started = time.monotonic()
    waiting = plane.peer.start("claim", queue="gpu", wait=20.0)

    inv = q.submit({"x": 1})
    job = waiting.result()

    assert job is not None and job["id"] == inv
    assert time.monotonic() - started < 15.0


def test_claim_with_wait_returns_none_when_nothing_comes(plane: PlaneEnv) -> None:
    started = time.monotonic()

    assert plane.queue("gpu").claim(wait=0.2) is None
    assert time.monotonic() - started >= 0.19


def test_each_job_is_claimed_exactly_once_across_processes(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    ids = set(q.submit_many([{"op": "double", "x": i} for i in range(40)]))

    with plane.extra_peers(2) as peers:
        pending = [p.start("serve", queue="gpu", n=40, wait=0.5) for p in peers]
        local = 0
        while (job := q.claim()) is not None:
            q.ack(job, "local")
            local += 1
        served = [p.result() for p in pending]

    assert local + sum(served) == 40
    assert q.count("succeeded") == 40 and q.count("queued") == 0
    assert {plane.dispatch.invocation(i).attempt for i in ids} == {1}


def test_ack_settles_succeeded_and_closes_the_journal(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1)
    job = plane.peer.claim("gpu")
    assert job is not None

    plane.peer.ack(job, {"ok": True})

    status = q.status(inv)
    assert status.state == "succeeded" and status.finished_at
    assert q.result(inv, timeout=1) == {"ok": True}
    assert list(q.stream(inv, timeout=1)) == []


def test_ack_with_a_foreign_lease_is_refused_and_changes_nothing(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1)
    job = plane.peer.claim("gpu")
    assert job is not None
    forged = dls.Job(id=job.id, payload=None, attempt=1, queue="gpu", lease="f" * 32)

    with pytest.raises(DispatchError):
        q.ack(forged, "clobbered")
    with pytest.raises(LeaseLost):
        q.nack(forged, error="clobbered", retry=False)

    assert q.status(inv).state == "running"
    plane.peer.ack(job, "real")
    assert q.result(inv, timeout=1) == "real"


def test_ack_of_an_unknown_id_is_not_found(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    ghost = dls.Job(id="01J00000000000000000000000", payload=None, attempt=1, queue="gpu")

    with pytest.raises(NotFound):
        q.ack(ghost, 1)


def test_a_repeated_ack_is_idempotent_but_a_later_nack_is_refused(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1)
    job = q.claim()
    assert job is not None
    q.ack(job, "first")

    q.ack(job, "first")  # the same settle again, e.g. after a lost response
    with pytest.raises(LeaseLost):
        q.nack(job, error="late", retry=False)

    assert q.status(inv).state == "succeeded"
    assert q.result(inv, timeout=1) == "first"


def test_a_repeated_ack_with_another_result_is_refused_and_the_first_stands(
    plane: PlaneEnv,
) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1)
    job = q.claim()
    assert job is not None
    q.ack(job, "first")

    with pytest.raises(Conflict, match="another result"):
        q.ack(job, "second")

    assert q.result(inv, timeout=1) == "first"


def test_nack_without_retry_fails_the_invocation(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1)
    job = plane.peer.claim("gpu")
    assert job is not None

    plane.peer.nack(job, error="disk full", retry=False)

    status = q.status(inv)
    assert status.state == "failed" and status.error == "disk full"
    with pytest.raises(DispatchError, match="disk full"):
        list(q.stream(inv, timeout=1))


def test_nack_with_retry_requeues_after_a_backoff_until_attempts_run_out(
    plane: PlaneEnv,
) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1, max_attempts=2)
    first = plane.peer.claim("gpu")
    assert first is not None

    nacked_at = time.monotonic()
    plane.peer.nack(first, error="flaky", retry=True)

    assert q.status(inv).state == "queued"
    assert q.claim() is None, "the retry must wait out its backoff"
    second = eventually(lambda: plane.peer.claim("gpu"), timeout=10)
    assert time.monotonic() - nacked_at >= 0.4
    assert second.attempt == 2 and second.id == inv

    plane.peer.nack(second, error="flaky again", retry=True)

    status = q.status(inv)
    assert status.state == "failed" and status.attempt == 2
    with pytest.raises(DispatchError, match="flaky again"):
        q.result(inv, timeout=1)


def test_nack_with_a_stale_lease_is_refused(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1)
    job = q.claim()
    assert job is not None
    q.ack(job, "done")

    with pytest.raises(LeaseLost):
        plane.peer.nack(job, error="late", retry=True)

    assert q.status(inv).state == "succeeded"


def test_working_acks_when_the_block_succeeds(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit({"x": 1})

    seen = plane.peer.call("working", queue="gpu")

    assert seen["job"]["id"] == inv and seen["raised"] is False
    assert q.status(inv).state == "succeeded"
    assert q.result(inv, timeout=1) is None


def test_working_nacks_with_retry_and_reraises_on_an_exception(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit({"x": 1})

    seen = plane.peer.call("working", queue="gpu", fail=True)

    assert seen["job"]["id"] == inv and seen["raised"] is True
    status = q.status(inv)
    assert status.state == "queued" and "boom in working()" in (status.error or "")


def test_working_yields_none_on_an_empty_queue(plane: PlaneEnv) -> None:
    with plane.queue("gpu").working() as job:
        assert job is None

    assert plane.peer.call("working", queue="gpu") == {"job": None, "raised": False}


def test_working_in_this_process(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit({"x": 2})

    with q.working() as job:
        assert job is not None
        q.post(job.id, "halfway")

    assert q.status(inv).state == "succeeded"
    assert list(q.stream(inv, timeout=1)) == ["halfway"]


def test_post_appends_frames_with_seqs_and_final_ends_the_journal(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1)
    job = plane.peer.claim("gpu")
    assert job is not None

    seqs = [plane.peer.post(job, {"step": i}) for i in range(3)]
    end = plane.peer.post(job, None, final=True)

    assert seqs == [0, 1, 2] and end == 3
    assert list(q.stream(inv, timeout=1)) == [{"step": 0}, {"step": 1}, {"step": 2}]
    plane.peer.ack(job, "done")
    assert q.result(inv, timeout=1) == "done"


def test_post_to_a_job_this_queue_did_not_claim_is_refused(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1)
    job = plane.peer.claim("gpu")
    assert job is not None

    with pytest.raises(DispatchError, match="post refused"):
        q.post(inv, "not mine")

    assert plane.dispatch.frames(inv) == []


def test_post_with_a_stale_lease_is_refused_and_changes_nothing(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1)
    job = q.claim()
    assert job is not None
    q.ack(job, "done")

    with pytest.raises(LeaseLost):
        plane.dispatch.post(inv, "VALUE", dls.encode("late"), lease=job.lease)
    with pytest.raises(LeaseLost):
        plane.dispatch.post(inv, "VALUE", dls.encode("forged"), lease=None)

    assert plane.dispatch.frames(inv) == []  # a settled job that never streamed has no frames


def test_post_to_an_unknown_invocation_is_not_found(plane: PlaneEnv) -> None:
    with pytest.raises(NotFound):
        plane.dispatch.post("01J00000000000000000000000", "VALUE", None, lease="x")


def test_release_gives_the_job_back_without_spending_an_attempt(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1)
    job = plane.peer.claim("gpu")
    assert job is not None

    assert plane.peer.call("release", id=job.id, lease=job.lease) is True

    assert q.status(inv).state == "queued"
    again = q.claim()
    assert again is not None and again.attempt == 1
    assert plane.dispatch.release(job.id, job.lease) is False  # the old lease is gone
    with pytest.raises(LeaseLost):
        q.ack(job, "stale")


def test_renew_extends_only_live_leases(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    q.submit(1)
    q.submit(2)
    live = plane.peer.claim("gpu", lease_s=0.3)
    done = plane.peer.claim("gpu")
    assert live is not None and done is not None
    plane.peer.ack(done, "ok")

    renewed = plane.peer.call("renew", leases=[live.lease, done.lease, "nope"], lease_s=30.0)

    assert renewed == {live.id: False}
    started = plane.dispatch.invocation(live.id).started_at or 0.0
    eventually(lambda: time.time() > started + 0.4)  # past the first lease; the renewal holds
    assert q.claim() is None
    plane.peer.ack(live, "still mine")
    assert q.result(live.id, timeout=1) == "still mine"


def test_renew_of_nothing_is_empty(plane: PlaneEnv) -> None:
    assert plane.dispatch.renew([], 10.0) == {}


def test_an_expired_lease_requeues_the_job_and_fences_the_old_worker(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit({"x": 1}, max_attempts=3)
    old = plane.peer.claim("gpu", lease_s=0.3)
    assert old is not None and old.attempt == 1

    new = eventually(lambda: q.claim(lease_s=30.0), timeout=10)

    assert new.id == inv and new.attempt == 2
    with pytest.raises(LeaseLost):
        plane.peer.ack(old, "stale result")
    with pytest.raises(LeaseLost):
        plane.peer.post(old, "stale frame")
    assert q.status(inv).state == "running"
    q.ack(new, "fresh result")
    assert plane.peer.call("result", id=inv) == "fresh result"


def test_an_expired_lease_ack_before_any_reclaim_is_refused(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1)
    job = plane.peer.claim("gpu", lease_s=0.2)
    assert job is not None
    eventually(lambda: time.time() > plane.dispatch.invocation(inv).started_at + 0.3)

    with pytest.raises(LeaseLost, match="expired"):
        plane.peer.ack(job, "too late")

    assert q.status(inv).state in ("running", "queued")
    assert q.claim() is not None  # the sweep hands it out again


def test_a_job_whose_leases_keep_expiring_fails_after_max_preemptions(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1, max_attempts=1, max_preemptions=1)
    first = plane.peer.claim("gpu", lease_s=0.2)
    assert first is not None
    second = eventually(lambda: q.claim(lease_s=0.2), timeout=10)
    assert second.attempt == 2

    eventually(lambda: q.claim() is None and q.status(inv).state == "failed", timeout=10)

    with pytest.raises(DispatchError, match="lease expired"):
        plane.peer.call("result", id=inv)
    with pytest.raises(DispatchError, match="lease expired"):
        list(q.stream(inv, timeout=1))
    assert q.count("failed") == 1 and q.count("queued") == 0
    row = q.status(inv)
    assert (row.attempt, row.preemptions, row.ended_by) == (2, 2, "daemon_lost")
    assert "max_preemptions of 1" in (row.error or "")


def test_result_sweeps_an_expired_last_attempt(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1, max_preemptions=0)
    assert plane.peer.claim("gpu", lease_s=0.2) is not None

    with pytest.raises(DispatchError, match="lease expired"):
        q.result(inv, timeout=10)


def test_run_worker_in_the_other_process_runs_a_handler_job(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit({"op": "double", "x": 21})

    assert plane.peer.call("run_worker", queue="gpu", once=True) == 1

    assert q.result(inv, timeout=5) == 42


def test_run_worker_burst_drains_the_queue(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    ids = [q.submit({"op": "double", "x": i}) for i in range(4)]

    assert plane.peer.call("run_worker", queue="gpu", burst=True) == 4

    assert [q.result(i, timeout=5) for i in ids] == [0, 2, 4, 6]
    assert plane.peer.call("run_worker", queue="gpu", burst=True) == 0


def test_a_kill_requested_job_whose_lease_expires_ends_killed(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1, max_attempts=3)
    assert plane.peer.claim("gpu", lease_s=0.2) is not None
    assert q.cancel(inv, kill=True) is True

    eventually(lambda: q.claim() is None and q.status(inv).state == "killed", timeout=10)

    with pytest.raises(DispatchError, match="killed"):
        q.result(inv, timeout=1)
    assert q.count("queued") == 0


def test_end_records_killed_and_timeout_and_refuses_other_states(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    killed, timed_out = q.submit(1), q.submit(2)
    a, b = plane.peer.claim("gpu"), plane.peer.claim("gpu")
    assert a is not None and b is not None

    with pytest.raises(InvalidArgument, match=r"killed|timeout"):
        plane.dispatch.end(a.id, a.lease, state="succeeded", error="no")
    plane.dispatch.end(a.id, a.lease, state="killed", error="terminated on request")
    plane.dispatch.end(b.id, b.lease, state="timeout", error="ran past timeout_s")

    assert q.status(killed).state == "killed" and q.status(timed_out).state == "timeout"
    with pytest.raises(DispatchError, match="terminated on request"):
        list(q.stream(killed, timeout=1))
    with pytest.raises(DispatchError, match="timeout"):
        plane.peer.call("result", id=timed_out)
    with pytest.raises(LeaseLost):
        plane.dispatch.end(b.id, "stale-lease", state="killed", error="late")


def test_one_claim_can_serve_several_queues_in_priority_order(plane: PlaneEnv) -> None:
    plane.queue("alpha").submit("a-low", priority=1.0)
    plane.queue("beta").submit("b-high", priority=5.0)
    plane.queue("gamma").submit("c-ignored", priority=9.0)

    got = []
    while (
        c := claiming.claim(plane.dispatch, ["alpha", "beta"], worker="w", kind="fifo")
    ) is not None:
        got.append((c.queue, dls.decode(c.payload)))

    assert got == [("beta", "b-high"), ("alpha", "a-low")]


def test_a_claim_without_a_kind_uses_the_queue_kind(plane: PlaneEnv) -> None:
    plane.dispatch.create_queue("stack", kind="filo")
    q = plane.queue("stack")
    for tag in ("old", "new"):
        q.submit(tag)

    claim = claiming.claim(plane.dispatch, ["stack"], worker="w")

    assert claim is not None and dls.decode(claim.payload) == "new"


def test_claim_with_a_bad_queue_name_or_kind_is_refused(plane: PlaneEnv) -> None:
    with pytest.raises(InvalidArgument, match="name"):
        claiming.claim(plane.dispatch, ["Bad Queue"], worker="w")
    with pytest.raises(InvalidArgument, match="unknown queue kind 'lifo'"):
        claiming.claim(plane.dispatch, ["gpu"], worker="w", kind="lifo")


def test_a_claim_records_the_worker(plane: PlaneEnv) -> None:
    inv = plane.queue("gpu").submit(1)

    claiming.claim(plane.dispatch, ["gpu"], worker="box-7:123")

    assert plane.dispatch.invocation(inv).worker == "box-7:123"
