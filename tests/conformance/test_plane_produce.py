"""Producer verbs: submit, result, call, cancel, count, idempotent keys, and their errors."""

from __future__ import annotations

import math

import pytest
from planes import PlaneEnv

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import DispatchError, InvalidArgument, NotFound

STATES = ("queued", "running", "succeeded", "failed", "cancelled", "killed", "timeout")


def test_submit_returns_a_durable_string_id_and_queues_the_payload(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")

    inv = q.submit({"x": 1, "t": (1, 2)})

    assert isinstance(inv, str) and len(inv) == 26
    assert q.count("queued") == 1
    job = plane.peer.claim("gpu")
    assert job is not None
    assert (job.id, job.payload, job.attempt, job.queue) == (inv, {"x": 1, "t": (1, 2)}, 1, "gpu")


def test_submit_attaches_priority_and_no_payload_is_none(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")

    inv = q.submit(priority=9.0)

    status = q.status(inv)
    assert status.priority == 9.0 and status.state == "queued"
    job = plane.peer.claim("gpu")
    assert job is not None and job.payload is None


def test_submit_an_envelope_is_run_by_the_worker(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")

    inv = q.submit(envelope=dls.Envelope.for_raw({"op": "double", "x": 21}))

    assert plane.peer.call("run_worker", queue="gpu", once=True) == 1
    assert q.result(inv, timeout=10) == 42


def test_submit_without_a_priority_is_priority_zero(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")

    assert q.status(q.submit({"x": 1})).priority == 0.0
    assert q.status(q.submit({"x": 1}, priority=None)).priority == 0.0


def test_submit_refuses_a_payload_and_an_envelope_together(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")

    with pytest.raises(InvalidArgument, match="not both"):
        q.submit({"x": 1}, envelope=dls.Envelope.for_raw(1))

    assert q.count() == 0


@pytest.mark.parametrize("priority", [math.nan, math.inf, -math.inf, "high", True])
def test_submit_refuses_a_bad_priority(plane: PlaneEnv, priority: object) -> None:
    q = plane.queue("gpu")

    with pytest.raises(InvalidArgument, match="priority"):
        q.submit({"x": 1}, priority=priority)  # type: ignore[arg-type]

    assert q.count() == 0


@pytest.mark.parametrize("key", ["", "k" * 513])
def test_submit_refuses_a_bad_key(plane: PlaneEnv, key: str) -> None:
    q = plane.queue("gpu")

    with pytest.raises(InvalidArgument, match="key"):
        q.submit({"x": 1}, key=key)


def test_submit_refuses_a_payload_the_codec_cannot_carry(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")

    with pytest.raises(DispatchError):
        q.submit(object())

    assert q.count() == 0


@pytest.mark.parametrize("name", ["Gpu", "-gpu", "gpu_1", "", "a b", "x" * 129, 7])
def test_bad_queue_names_are_refused(plane: PlaneEnv, name: object) -> None:
    with pytest.raises(InvalidArgument, match="name"):
        dls.SyncQueue(name, dispatch=plane.dispatch)  # type: ignore[arg-type]


def test_unknown_kind_is_refused_with_the_documented_message(plane: PlaneEnv) -> None:
    with pytest.raises(DispatchError) as err:
        dls.SyncQueue("gpu", dispatch=plane.dispatch, kind="lifo")

    assert str(err.value) == "unknown queue kind 'lifo'; use fifo|filo|boltzmann"


def test_negative_temperature_is_refused(plane: PlaneEnv) -> None:
    with pytest.raises(InvalidArgument, match="temperature"):
        dls.SyncQueue("gpu", dispatch=plane.dispatch, kind="boltzmann", temperature=-1.0)


def test_result_returns_the_acked_value_read_from_the_other_process(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit({"x": 1})
    job = q.claim()
    assert job is not None

    q.ack(job, {"y": [1, 2], "t": (3,)})

    assert plane.peer.call("result", id=inv) == {"y": [1, 2], "t": (3,)}
    assert q.result(inv, timeout=1) == {"y": [1, 2], "t": (3,)}


def test_result_waits_for_a_worker_in_the_other_process(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    worker = plane.peer.start("claim", queue="gpu", wait=20.0)

    inv = q.submit({"op": "double", "x": 4})
    job = dls.Job(**worker.result())
    plane.peer.ack(job, 8)

    assert q.result(inv, timeout=20) == 8


def test_result_times_out_on_a_job_nobody_runs(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit({"x": 1})

    with pytest.raises(TimeoutError):
        q.result(inv, timeout=0.2)

    assert q.status(inv).state == "queued"


def test_result_of_an_unknown_id_is_not_found(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")

    with pytest.raises(NotFound):
        q.result("01J00000000000000000000000", timeout=0.1)


def test_result_raises_for_a_failed_invocation_with_its_error(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit({"op": "fail", "msg": "out of memory"})

    plane.peer.call("run_worker", queue="gpu", once=True)

    with pytest.raises(DispatchError, match="out of memory"):
        q.result(inv, timeout=10)
    assert q.status(inv).state == "failed"


def test_call_submits_and_waits_for_the_result(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    server = plane.peer.start("serve", queue="gpu", n=1)

    answer = q.call({"op": "double", "x": 5}, timeout=20.0)

    assert answer == 10
    assert server.result() == 1


def test_call_forwards_submit_options(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    server = plane.peer.start("serve", queue="gpu", n=1)

    assert q.call({"op": "double", "x": 1}, key="rpc-1", priority=3.0, timeout=20.0) == 2

    assert server.result() == 1
    inv = q.submit(None, key="rpc-1")  # the key names the call's invocation
    status = q.status(inv)
    assert (status.key, status.priority, status.state) == ("rpc-1", 3.0, "succeeded")


def test_call_times_out_and_leaves_the_job_queued(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")

    with pytest.raises(TimeoutError, match="still queued"):
        q.call({"x": 1}, timeout=0.2)

    assert q.count("queued") == 1


def test_call_of_a_key_that_already_ended_answers_at_once(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    server = plane.peer.start("serve", queue="gpu", n=1)
    assert q.call({"op": "double", "x": 2}, key="done-once", timeout=20.0) == 4
    assert server.result() == 1

    # Nobody serves the queue now: the same key names the ended invocation.
    assert q.call({"op": "double", "x": 2}, key="done-once", timeout=5.0) == 4


def test_submit_and_wait_answers_the_ended_invocation(plane: PlaneEnv) -> None:
    from dreamlake.lakeshore.types import SubmitRequest

    server = plane.peer.start("serve", queue="gpu", n=1)

    inv = plane.dispatch.submit_and_wait(
        "gpu", SubmitRequest(dls.encode({"op": "double", "x": 21})), wait_s=20.0
    )

    assert server.result() == 1
    assert inv.state == "succeeded" and dls.decode(inv.result or b"") == 42
    assert inv.attempt == 1 and inv.queue == "gpu"


def test_same_key_returns_the_same_id(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")

    first = q.submit({"seed": 42}, key="sweep/42")
    again = q.submit({"seed": 43}, key="sweep/42")
    from_peer = plane.peer.call("submit", queue="gpu", payload={"seed": 44}, key="sweep/42")

    assert first == again == from_peer
    assert q.count() == 1
    job = q.claim()
    assert job is not None and job.payload == {"seed": 42}


def test_same_key_on_another_queue_is_another_invocation(plane: PlaneEnv) -> None:
    a = plane.queue("alpha").submit({"x": 1}, key="nightly")
    b = plane.queue("beta").submit({"x": 1}, key="nightly")

    assert a != b
    assert plane.queue("alpha").count() == 1 and plane.queue("beta").count() == 1


def test_same_key_stays_idempotent_after_the_job_finished(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit({"x": 1}, key="once")
    job = q.claim()
    assert job is not None
    q.ack(job, 1)

    assert q.submit({"x": 2}, key="once") == inv
    assert q.count("queued") == 0 and q.count("succeeded") == 1


def test_concurrent_submits_of_one_key_from_several_processes_make_one_invocation(
    plane: PlaneEnv,
) -> None:
    with plane.extra_peers(4) as peers:
        pending = [p.start("submit_repeat", queue="gpu", key="storm", n=25) for p in peers]
        ids = [i for p in pending for i in p.result()]

    assert len(ids) == 100
    assert len(set(ids)) == 1
    assert plane.queue("gpu").count() == 1


def test_cancel_a_queued_invocation(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit({"x": 1})

    assert q.cancel(inv) is True

    assert q.status(inv).state == "cancelled"
    assert q.claim() is None
    with pytest.raises(DispatchError, match="cancelled"):
        q.result(inv, timeout=1)
    assert q.cancel(inv) is False  # already terminal


def test_cancel_a_running_invocation_lets_the_attempt_finish(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit({"x": 1})
    job = plane.peer.claim("gpu")
    assert job is not None

    assert q.cancel(inv) is False

    status = q.status(inv)
    assert status.state == "running" and status.kill_requested is False
    plane.peer.ack(job, "done")
    assert q.result(inv, timeout=5) == "done"


def test_cancel_with_kill_marks_a_running_invocation_and_renew_reports_it(
    plane: PlaneEnv,
) -> None:
    q = plane.queue("gpu")
    inv = q.submit({"x": 1})
    job = plane.peer.claim("gpu")
    assert job is not None

    assert q.cancel(inv, kill=True) is True

    assert q.status(inv).kill_requested is True
    assert plane.peer.call("renew", leases=[job.lease], lease_s=30.0) == {inv: True}


def test_cancel_with_kill_on_a_queued_invocation_cancels_it(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit({"x": 1})

    assert q.cancel(inv, kill=True) is True
    assert q.status(inv).state == "cancelled"


def test_cancel_an_unknown_id_is_not_found(plane: PlaneEnv) -> None:
    with pytest.raises(NotFound):
        plane.queue("gpu").cancel("01J00000000000000000000000")


def test_count_counts_every_state(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    d = plane.dispatch
    ids = [q.submit({"i": i}) for i in range(7)]  # claimed in this order (fifo)
    jobs = [q.claim() for _ in range(5)]
    assert all(jobs)
    q.ack(jobs[0], 1)  # succeeded
    q.nack(jobs[1], error="bad", retry=False)  # failed
    d.end(jobs[2].id, jobs[2].lease, state="killed", error="killed by the daemon")
    d.end(jobs[3].id, jobs[3].lease, state="timeout", error="timeout_s exceeded")
    # jobs[4] stays running
    assert q.cancel(ids[5]) is True  # cancelled; ids[6] stays queued

    counts = {s: q.count(s) for s in STATES}

    assert counts == dict.fromkeys(STATES, 1)
    assert len(q) == 1
    assert plane.peer.call("count", queue="gpu", state="killed") == 1


def test_count_of_an_unknown_state_raises(plane: PlaneEnv) -> None:
    with pytest.raises(DispatchError, match="unknown state 'done'"):
        plane.queue("gpu").count("done")
    with pytest.raises(DispatchError, match="unknown state"):
        plane.dispatch.count("gpu", "done")


def test_counts_are_per_queue(plane: PlaneEnv) -> None:
    plane.queue("alpha").submit(1)
    plane.queue("alpha").submit(2)
    plane.queue("beta").submit(3)

    assert len(plane.queue("alpha")) == 2
    assert len(plane.queue("beta")) == 1
    assert len(plane.queue("gamma")) == 0


def test_submit_many_enqueues_in_order(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")

    ids = q.submit_many([{"i": i} for i in range(5)])

    assert len(set(ids)) == 5
    claimed = [plane.peer.claim("gpu") for _ in range(5)]
    assert [j.payload["i"] for j in claimed if j] == [0, 1, 2, 3, 4]
