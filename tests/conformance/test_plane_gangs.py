"""Gangs (issue 47): a job of `nodes` > 1 handed out as parts, one per worker, held until all
are, started together, let go together after `gang_wait_s`, ended together when one part
fails: the same on every plane."""

from __future__ import annotations

import secrets
import threading
from typing import Any

import pytest
from planes import PlaneEnv, eventually

from dreamlake.lakeshore.errors import InvalidArgument, LeaseLost
from dreamlake.lakeshore.types import GangState, SubmitRequest
from tests.support import claiming


def _queue(plane: PlaneEnv, **admission: Any) -> str:
    name = f"gang-{secrets.token_hex(3)}"
    plane.dispatch.create_queue(name, admission=admission)
    return name


def _gang(plane: PlaneEnv, queue: str, nodes: int = 2, payload: bytes = b"g") -> str:
    (inv_id,) = plane.dispatch.submit(queue, [SubmitRequest(payload, nodes=nodes)])
    return inv_id


def test_a_gang_is_handed_out_in_distinct_ranks_and_starts_once_all_are_held(
    plane: PlaneEnv,
) -> None:
    q = _queue(plane)
    inv_id = _gang(plane, q)
    assert plane.dispatch.invocation(inv_id).nodes == 2

    a = claiming.claim(plane.dispatch, [q], worker="w1", addr="10.0.0.1")
    assert a is not None and a.gang == {"rank": 0, "nodes": 2, "attempt": 1}
    # One worker claiming again gets no second rank (and, holding a part, nothing else).
    assert claiming.claim(plane.dispatch, [q], worker="w1") is None
    held = plane.dispatch.gang(inv_id, a.lease)
    assert (held.state, held.held, held.nodes, held.rank) == ("holding", 1, 2, 0)
    assert held.parts == [
        {"rank": 0, "worker": "w1", "addr": "10.0.0.1", "port": None, "state": "held"}
    ]
    row = plane.dispatch.invocation(inv_id)
    assert row.state == "queued" and row.pending_reason == "gang"
    assert "1 of 2 parts held" in (row.unschedulable_reason or "")

    plane.dispatch.gang_ready(inv_id, a.lease, port=29500)  # rank 0's: MASTER_PORT
    b = claiming.claim(plane.dispatch, [q], worker="w2", addr="10.0.0.2")
    assert b is not None and b.gang == {"rank": 1, "nodes": 2, "attempt": 1}
    assert b.lease != a.lease and b.payload == b"g"
    for lease in (a.lease, b.lease):
        started = plane.dispatch.gang(inv_id, lease)
        assert started.state == "started" and started.held == 2
        assert [(p["rank"], p["worker"], p["addr"], p["port"]) for p in started.parts] == [
            (0, "w1", "10.0.0.1", 29500),
            (1, "w2", "10.0.0.2", None),
        ]
    assert plane.dispatch.invocation(inv_id).state == "running"
    # A third worker gets nothing of it.
    assert claiming.claim(plane.dispatch, [q], worker="w3") is None


def test_rank_0s_ack_is_the_jobs_result_and_other_ranks_acks_are_accepted(
    plane: PlaneEnv,
) -> None:
    q = _queue(plane)
    inv_id = _gang(plane, q)
    a = claiming.claim(plane.dispatch, [q], worker="w1")
    b = claiming.claim(plane.dispatch, [q], worker="w2")
    assert a is not None and b is not None
    plane.dispatch.ack(inv_id, b.lease, b"rank1")
    assert plane.dispatch.invocation(inv_id).state == "running"  # rank 0 still runs
    plane.dispatch.renew([a.lease, b.lease], 60.0)
    plane.dispatch.ack(inv_id, a.lease, b"rank0")
    done = plane.dispatch.invocation(inv_id)
    assert (done.state, done.result) == ("succeeded", b"rank0")
    ended = plane.dispatch.gang(inv_id, b.lease)
    assert (ended.state, ended.outcome, ended.failed) == ("ended", "succeeded", None)
    assert [p["state"] for p in ended.parts] == ["acked", "acked"]


def test_a_holding_worker_claims_nothing_else_until_its_gang_starts(plane: PlaneEnv) -> None:
    q = _queue(plane)
    inv_id = _gang(plane, q)
    (single,) = plane.dispatch.submit(q, [SubmitRequest(b"one")])
    a = claiming.claim(plane.dispatch, [q], worker="w1")
    assert a is not None and a.id == inv_id and a.gang is not None
    assert claiming.claim(plane.dispatch, [q], worker="w1") is None
    b = claiming.claim(plane.dispatch, [q], worker="w2")
    assert b is not None and b.id == inv_id
    one = claiming.claim(plane.dispatch, [q], worker="w1")  # started: free to take more
    assert one is not None and one.id == single and one.gang is None


def test_two_gangs_on_two_workers_one_starts_the_other_waits(plane: PlaneEnv) -> None:
    q = _queue(plane)
    first, second = _gang(plane, q, payload=b"first"), _gang(plane, q, payload=b"second")
    a = claiming.claim(plane.dispatch, [q], worker="w1")
    b = claiming.claim(plane.dispatch, [q], worker="w2")
    assert a is not None and b is not None and a.id == b.id == first
    assert plane.dispatch.gang(first, a.lease).state == "started"
    row = plane.dispatch.invocation(second)
    assert row.state == "queued" and row.pending_reason != "gang"  # none of it held


def test_a_gang_not_complete_within_gang_wait_s_is_let_go_and_waits_again(
    plane: PlaneEnv,
) -> None:
    q = _queue(plane, gang_wait_s=0.5)
    inv_id = _gang(plane, q)
    a = claiming.claim(plane.dispatch, [q], worker="w1")
    assert a is not None
    state = plane.dispatch.gang(inv_id, a.lease)
    if state.state == "holding":  # the wait wakes when the gang is let go
        state = plane.dispatch.gang(inv_id, a.lease, wait_s=10.0)
    assert (state.state, state.outcome) == ("ended", "released")
    assert state.parts[0]["state"] == "released"
    row = plane.dispatch.invocation(inv_id)
    assert row.state == "queued" and row.attempt == 0 and row.pending_reason == "gang"
    assert "1 of 2 parts held within gang_wait_s" in (row.unschedulable_reason or "")
    with pytest.raises(LeaseLost):
        plane.dispatch.nack(inv_id, a.lease, error="late")
    # The worker it let go may hold a part of the job's next gang.
    again = claiming.claim(plane.dispatch, [q], worker="w1")
    assert again is not None and again.id == inv_id and again.lease != a.lease
    assert plane.dispatch.gang(inv_id, again.lease).state == "holding"


def test_a_failed_part_ends_the_attempt_for_every_part_and_the_retry_is_a_new_gang(
    plane: PlaneEnv,
) -> None:
    q = _queue(plane)
    inv_id = _gang(plane, q)
    a = claiming.claim(plane.dispatch, [q], worker="w1")
    b = claiming.claim(plane.dispatch, [q], worker="w2")
    assert a is not None and b is not None
    seen = plane.dispatch.gang(inv_id, a.lease)
    assert seen.state == "started"

    woke: list[GangState] = []
    # The waiting part is another daemon: a plane of its own (an HTTP plane's connection is
    # one thread's).
    with plane.in_namespace(plane.dispatch.namespace) as other:
        waiter = threading.Thread(
            target=lambda: woke.append(other.gang(inv_id, a.lease, wait_s=30.0, since=seen.version))
        )
        waiter.start()
        try:
            assert plane.dispatch.nack(inv_id, b.lease, error="rank 1 died") == "queued"
        finally:
            waiter.join(timeout=15.0)
    assert not waiter.is_alive(), "gang() did not wake when the attempt ended"
    assert woke[0].state == "ended" and woke[0].outcome == "failed"
    assert woke[0].failed == {"rank": 1, "worker": "w2", "why": "rank 1 died"}
    assert [p["state"] for p in woke[0].parts] == ["stopped", "failed"]
    with pytest.raises(LeaseLost):
        plane.dispatch.ack(inv_id, a.lease, b"late")  # rank 0's lease is stale
    with pytest.raises(LeaseLost):
        plane.dispatch.ack(inv_id, b.lease, b"late")
    assert plane.dispatch.renew([a.lease, b.lease], 60.0) == {}

    row = plane.dispatch.invocation(inv_id)
    assert row.state == "queued" and row.attempt == 1 and row.error == "rank 1 died"
    # The retry (after its backoff) is a whole gang of new parts, attempt 2.
    c = eventually(lambda: claiming.claim(plane.dispatch, [q], worker="w2"))
    d = claiming.claim(plane.dispatch, [q], worker="w1")
    assert d is not None
    assert c.gang == {"rank": 0, "nodes": 2, "attempt": 2} and c.lease not in (a.lease, b.lease)
    assert d.gang == {"rank": 1, "nodes": 2, "attempt": 2}
    assert plane.dispatch.gang(inv_id, c.lease).state == "started"
    plane.dispatch.ack(inv_id, c.lease, b"done")
    assert plane.dispatch.invocation(inv_id).result == b"done"


def test_a_started_part_whose_lease_runs_out_ends_the_attempt_uncharged(
    plane: PlaneEnv,
) -> None:
    q = _queue(plane)
    inv_id = _gang(plane, q)
    a = claiming.claim(plane.dispatch, [q], worker="w1")
    b = claiming.claim(plane.dispatch, [q], worker="w2", lease_s=0.3)
    assert a is not None and b is not None

    def ended() -> GangState | None:
        plane.dispatch.renew([a.lease], 60.0)  # rank 0 lives; rank 1 stopped heartbeating
        state = plane.dispatch.gang(inv_id, a.lease)
        return state if state.state == "ended" else None

    state = eventually(ended)
    assert state.failed is not None and state.failed["rank"] == 1
    assert [p["state"] for p in state.parts] == ["stopped", "lost"]
    row = plane.dispatch.invocation(inv_id)
    assert row.state == "queued" and row.preemptions == 1 and row.ended_by == "daemon_lost"


@pytest.mark.parametrize("nodes", [0, -1, 1000, "x", 2.0, True, None])
def test_a_bad_nodes_is_refused_naming_it(plane: PlaneEnv, nodes: Any) -> None:
    q = _queue(plane)
    with pytest.raises(InvalidArgument, match=r"nodes must be a whole number 1\.\.256"):
        plane.dispatch.submit(q, [SubmitRequest(b"x", nodes=nodes)])
    assert plane.dispatch.count(q) == 0


def test_a_bad_gang_wait_s_or_port_is_refused(plane: PlaneEnv) -> None:
    with pytest.raises(InvalidArgument, match=r"admission\.gang_wait_s"):
        plane.dispatch.create_queue(f"gang-{secrets.token_hex(3)}", admission={"gang_wait_s": 0})
    q = _queue(plane)
    inv_id = _gang(plane, q)
    a = claiming.claim(plane.dispatch, [q], worker="w1")
    assert a is not None
    with pytest.raises(InvalidArgument, match=r"port must be a whole number 1\.\.65535"):
        plane.dispatch.gang_ready(inv_id, a.lease, port=70000)
    with pytest.raises(InvalidArgument, match="addr must be a host name or an IP address"):
        plane.dispatch.gang_ready(inv_id, a.lease, addr="not an address")
