"""Gangs (issue 47): a job of `nodes` > 1 handed out as parts, one per worker, held until all
are, started together, let go together after `gang_wait_s`, ended together when one part
fails: the same on every plane."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from planes import PlaneEnv, eventually

from dreamlake.lakeshore.errors import DispatchError, InvalidArgument, LeaseLost
from dreamlake.lakeshore.types import GangState, SubmitRequest
from tests.support import claiming


def _queue(plane: PlaneEnv, **admission: Any) -> str:
    name = f"gang-{secrets.token_hex(3)}"
    plane.dispatch.create_queue(name, admission=admission)
    return name


def _gang(plane: PlaneEnv, queue: str, nodes: int = 2, payload: bytes = b"g") -> str:
    (inv_id,) = plane.dispatch.submit(queue, [SubmitRequest(payload, nodes=nodes)])
    return inv_id


def _woken_by(
    plane: PlaneEnv, inv_id: str, lease: str, since: int, act: Callable[[], object], what: str
) -> GangState:
    """What a part waiting on its gang (`gang(..., wait_s=)`) reads once `act` ran. The waiting
    part is another daemon: a plane of its own (an HTTP plane's connection is one thread's)."""
    woke: list[GangState] = []
    with plane.in_namespace(plane.dispatch.namespace) as other:
        waiter = threading.Thread(
            target=lambda: woke.append(other.gang(inv_id, lease, wait_s=30.0, since=since))
        )
        waiter.start()
        try:
            act()
        finally:
            waiter.join(timeout=15.0)
    assert not waiter.is_alive(), f"gang() did not wake {what}"
    return woke[0]


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


@pytest.mark.parametrize("first", [0, 1])
def test_the_job_succeeds_with_rank_0s_result_once_every_part_acked(
    plane: PlaneEnv, first: int
) -> None:
    q = _queue(plane)
    inv_id = _gang(plane, q)
    a = claiming.claim(plane.dispatch, [q], worker="w1")
    b = claiming.claim(plane.dispatch, [q], worker="w2")
    assert a is not None and b is not None
    parts = [(a, b"rank0"), (b, b"rank1")]
    early, late = parts[first], parts[1 - first]
    plane.dispatch.ack(inv_id, early[0].lease, early[1])
    plane.dispatch.ack(inv_id, early[0].lease, early[1])  # the same ack again: fine
    with pytest.raises(DispatchError, match="already acked with another result"):
        plane.dispatch.ack(inv_id, early[0].lease, b"other")
    assert plane.dispatch.invocation(inv_id).state == "running"  # the other part still runs
    # Only the running part renews: the job's row lives on its lease.
    assert plane.dispatch.renew([late[0].lease], 60.0) == {inv_id: False}
    plane.dispatch.ack(inv_id, late[0].lease, late[1])
    done = plane.dispatch.invocation(inv_id)
    assert (done.state, done.result) == ("succeeded", b"rank0")
    ended = plane.dispatch.gang(inv_id, b.lease)
    assert (ended.state, ended.outcome, ended.failed) == ("ended", "succeeded", None)
    assert [p["state"] for p in ended.parts] == ["acked", "acked"]


def test_a_part_failing_after_rank_0_acked_fails_the_attempt_as_a_whole(
    plane: PlaneEnv,
) -> None:
    q = _queue(plane)
    inv_id = _gang(plane, q)
    a = claiming.claim(plane.dispatch, [q], worker="w1")
    b = claiming.claim(plane.dispatch, [q], worker="w2")
    assert a is not None and b is not None
    plane.dispatch.ack(inv_id, a.lease, b"rank0")
    assert plane.dispatch.nack(inv_id, b.lease, error="rank 1 failed late") == "queued"
    row = plane.dispatch.invocation(inv_id)
    assert (row.state, row.result, row.error) == ("queued", None, "rank 1 failed late")
    state = plane.dispatch.gang(inv_id, a.lease)
    assert state.outcome == "failed" and state.failed is not None and state.failed["rank"] == 1


def test_each_parts_frames_are_kept_with_its_rank(plane: PlaneEnv) -> None:
    q = _queue(plane)
    inv_id = _gang(plane, q)
    a = claiming.claim(plane.dispatch, [q], worker="w1")
    b = claiming.claim(plane.dispatch, [q], worker="w2")
    assert a is not None and b is not None
    plane.dispatch.post(inv_id, "VALUE", b"zero", lease=a.lease)
    plane.dispatch.post(inv_id, "VALUE", b"one", lease=b.lease)
    plane.dispatch.post(inv_id, "VALUE", b"zero again", lease=a.lease)
    assert [f.value for f in plane.dispatch.frames(inv_id)] == [b"zero", b"zero again"]
    assert [f.value for f in plane.dispatch.frames(inv_id, rank=1)] == [b"one"]
    assert plane.dispatch.frames(inv_id, rank=2) == []
    with pytest.raises(InvalidArgument, match=r"rank must be a whole number 0\.\.255"):
        plane.dispatch.frames(inv_id, rank=-1)
    # Rank 0 done, rank 1 still posts; once the gang's attempt is over its posts are refused.
    plane.dispatch.ack(inv_id, a.lease, b"r0")
    plane.dispatch.post(inv_id, "VALUE", b"one more", lease=b.lease)
    plane.dispatch.nack(inv_id, b.lease, error="down", retry=False)
    with pytest.raises(LeaseLost):
        plane.dispatch.post(inv_id, "VALUE", b"late", lease=b.lease)
    assert [f.value for f in plane.dispatch.frames(inv_id, rank=1)] == [b"one", b"one more"]


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
    assert plane.dispatch.release(inv_id, again.lease)  # w1 is free for the next test


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

    def fail() -> None:
        assert plane.dispatch.nack(inv_id, b.lease, error="rank 1 died") == "queued"

    woken = _woken_by(plane, inv_id, a.lease, seen.version, fail, "when the attempt ended")
    assert woken.state == "ended" and woken.outcome == "failed"
    assert woken.failed == {"rank": 1, "worker": "w2", "why": "rank 1 died"}
    assert [p["state"] for p in woken.parts] == ["stopped", "failed"]
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
    plane.dispatch.ack(inv_id, d.lease, None)
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


def test_a_gang_its_live_daemons_cannot_complete_holds_none_of_them(plane: PlaneEnv) -> None:
    """Two daemons and a 3-node job: no part is held (each would stop its daemon taking other
    work), the job is named unschedulable, and the daemons keep running single jobs."""
    q = _queue(plane)
    for name in ("w1", "w2"):
        plane.dispatch.register_worker(name, queues=[q])
    inv_id = _gang(plane, q, nodes=3)
    (single,) = plane.dispatch.submit(q, [SubmitRequest(b"one")])
    got = claiming.claim(plane.dispatch, [q], worker="w1")
    assert got is not None and got.id == single and got.gang is None
    row = plane.dispatch.invocation(inv_id)
    assert row.state == "queued" and row.pending_reason == "unschedulable"
    assert "gang of 3 parts, one per daemon: 2 live daemon(s)" in (row.unschedulable_reason or "")
    plane.dispatch.register_worker("w3", queues=[q])  # a third arrives: the gang can go
    parts = [claiming.claim(plane.dispatch, [q], worker=w) for w in ("w2", "w3", "w1")]
    assert all(p is not None and p.id == inv_id for p in parts)
    assert plane.dispatch.invocation(inv_id).state == "running"


def test_the_retry_of_a_failed_gang_avoids_the_daemon_that_failed_first(plane: PlaneEnv) -> None:
    q = _queue(plane)
    for name in ("w1", "w2", "w3"):
        plane.dispatch.register_worker(name, queues=[q])
    inv_id = _gang(plane, q)
    a = claiming.claim(plane.dispatch, [q], worker="w1")
    b = claiming.claim(plane.dispatch, [q], worker="w2")
    assert a is not None and b is not None
    plane.dispatch.nack(inv_id, b.lease, error="w2's part died")
    # The retry (after its backoff): w1 and w3 can run it, so w2 gets none of it.
    c = eventually(lambda: claiming.claim(plane.dispatch, [q], worker="w3"))
    assert claiming.claim(plane.dispatch, [q], worker="w2") is None
    d = claiming.claim(plane.dispatch, [q], worker="w1")
    assert c is not None and d is not None and c.id == d.id == inv_id
    assert plane.dispatch.gang(inv_id, c.lease).state == "started"


def test_a_notice_to_one_part_wakes_every_part_and_a_preempted_part_ends_the_attempt_uncharged(
    plane: PlaneEnv,
) -> None:
    q = _queue(plane)
    inv_id = _gang(plane, q)
    a = claiming.claim(plane.dispatch, [q], worker="w1")
    b = claiming.claim(plane.dispatch, [q], worker="w2")
    assert a is not None and b is not None
    seen = plane.dispatch.gang(inv_id, a.lease)
    assert seen.noticed is None
    until = time.time() + 30
    woken = _woken_by(
        plane,
        inv_id,
        a.lease,
        seen.version,
        lambda: plane.dispatch.gang_notice(inv_id, b.lease, until=until),
        "at the notice",
    )
    assert woken.state == "started" and woken.noticed is not None
    assert woken.noticed["rank"] == 1 and woken.noticed["until"] == pytest.approx(until)
    # A later notice only brings the end of the grace closer.
    plane.dispatch.gang_notice(inv_id, a.lease, until=until + 60)
    assert plane.dispatch.gang(inv_id, a.lease).noticed == woken.noticed
    with pytest.raises(InvalidArgument, match="until must be epoch seconds"):
        plane.dispatch.gang_notice(inv_id, a.lease, until="soon")  # type: ignore[arg-type]

    assert plane.dispatch.release(inv_id, b.lease, outcome="preempted", cause="notice")
    ended = plane.dispatch.gang(inv_id, a.lease)
    assert (ended.state, ended.outcome) == ("ended", "preempted")
    row = plane.dispatch.invocation(inv_id)
    assert (row.state, row.preemptions, row.attempt) == ("queued", 1, 1)
    with pytest.raises(LeaseLost):
        plane.dispatch.gang_notice(inv_id, a.lease, until=until)


def test_a_gangs_row_shows_its_newest_attempt_and_the_queue_counts_gangs_waiting(
    plane: PlaneEnv,
) -> None:
    q = _queue(plane)
    inv_id = _gang(plane, q)
    (single,) = plane.dispatch.submit(q, [SubmitRequest(b"one")])
    assert plane.dispatch.invocation(inv_id).gang is None  # no part held yet
    assert plane.dispatch.invocation(single).gang is None
    assert plane.dispatch.stats(q)["gangs_waiting"] == 1
    a = claiming.claim(plane.dispatch, [q], worker="w1", addr="10.0.0.1")
    assert a is not None
    held = plane.dispatch.invocation(inv_id).gang
    assert held is not None and (held["attempt"], held["state"], held["held"]) == (1, "holding", 1)
    b = claiming.claim(plane.dispatch, [q], worker="w2", addr="10.0.0.2")
    assert b is not None
    assert plane.dispatch.stats(q)["gangs_waiting"] == 0
    plane.dispatch.nack(inv_id, b.lease, error="boom", retry=False)
    ended = plane.dispatch.invocation(inv_id).gang
    assert ended is not None
    assert (ended["state"], ended["outcome"]) == ("ended", "failed")
    assert ended["parts"] == [
        {"rank": 0, "worker": "w1", "addr": "10.0.0.1", "state": "stopped"},
        {"rank": 1, "worker": "w2", "addr": "10.0.0.2", "state": "failed"},
    ]
    assert ended["failed"] == {"rank": 1, "worker": "w2", "why": "boom"}


def test_a_parts_progress_moves_the_gang_and_a_hang_found_wakes_every_part(
    plane: PlaneEnv,
) -> None:
    q = _queue(plane)
    inv_id = _gang(plane, q)
    a = claiming.claim(plane.dispatch, [q], worker="w1")
    b = claiming.claim(plane.dispatch, [q], worker="w2")
    assert a is not None and b is not None
    seen = plane.dispatch.gang(inv_id, a.lease)
    assert seen.progress_at is not None and seen.hung is None  # the start, until a part moves
    moved = plane.dispatch.gang_progress(inv_id, b.lease)
    assert moved.progress_at is not None and moved.progress_at >= seen.progress_at
    assert moved.version == seen.version  # a move wakes no waiter
    woken = _woken_by(
        plane,
        inv_id,
        a.lease,
        seen.version,
        lambda: plane.dispatch.gang_progress(inv_id, b.lease, hung=True),
        "at the hang",
    )
    assert woken.hung is not None and woken.hung["rank"] == 1
    plane.dispatch.gang_progress(inv_id, a.lease, hung=True)  # the first finder is kept
    assert plane.dispatch.gang(inv_id, a.lease).hung == woken.hung
    plane.dispatch.nack(inv_id, b.lease, error="hung: no part moved")
    with pytest.raises(LeaseLost):
        plane.dispatch.gang_progress(inv_id, a.lease)


def test_a_gang_takes_its_turn_in_the_claim_order_and_then_holds_the_queue(
    plane: PlaneEnv,
) -> None:
    """A one-box job before the gang (older, or of higher priority though newer) is claimed
    first; once the gang is the head and holds a part, it is the queue's reservation: the next
    free worker joins it rather than take the older-priority job behind it."""
    q = _queue(plane)
    (older,) = plane.dispatch.submit(q, [SubmitRequest(b"older")])
    inv_id = _gang(plane, q)
    (urgent,) = plane.dispatch.submit(q, [SubmitRequest(b"urgent", priority=5)])
    (later,) = plane.dispatch.submit(q, [SubmitRequest(b"later")])

    first = claiming.claim(plane.dispatch, [q], worker="w1")
    second = claiming.claim(plane.dispatch, [q], worker="w2")
    assert first is not None and second is not None
    assert (first.id, second.id) == (urgent, older)  # the claim order, the gang passed by
    third = claiming.claim(plane.dispatch, [q], worker="w3")
    assert third is not None and (third.id, third.gang) == (
        inv_id,
        {"rank": 0, "nodes": 2, "attempt": 1},
    )
    plane.dispatch.ack(urgent, first.lease, b"")
    # w1 is free again: the holding gang, not the job behind it
    fourth = claiming.claim(plane.dispatch, [q], worker="w1")
    assert fourth is not None and fourth.id == inv_id and fourth.gang is not None
    assert fourth.gang["rank"] == 1
    assert plane.dispatch.invocation(inv_id).state == "running"
    assert plane.dispatch.invocation(later).state == "queued"


@pytest.mark.parametrize(("most", "reason"), [(4, "waiting_for_capacity"), (2, "unschedulable")])
def test_a_gang_too_big_for_the_live_daemons_waits_for_the_controller_when_it_can_launch(
    plane: PlaneEnv, most: int, reason: str
) -> None:
    """One live daemon, a 3-node job, and a queue the controller scales through a provider:
    with room for three daemons under its max the job waits for capacity (the controller
    launches them, controller/packing.py); with a max of two nothing could ever run it."""
    provider = f"p{secrets.token_hex(3)}"
    plane.dispatch.add_provider(provider, "local", {})
    q = f"gang-{secrets.token_hex(3)}"
    plane.dispatch.create_queue(
        q, elasticity={"kind": "fully_elastic", "max": most, "provider": provider}
    )
    plane.dispatch.register_worker("w1", queues=[q])
    inv_id = _gang(plane, q, nodes=3)
    assert claiming.claim(plane.dispatch, [q], worker="w1") is None
    row = plane.dispatch.invocation(inv_id)
    assert (row.state, row.pending_reason) == ("queued", reason)
    words = row.unschedulable_reason or ""
    assert "gang of 3 parts, one per daemon: 1 live daemon(s)" in words
    assert (f"provider {provider} launches more" in words) == (reason == "waiting_for_capacity")
