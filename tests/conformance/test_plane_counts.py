"""Depth counters on every plane (issue 17): `count`, `len` and stats read counters that the
store keeps in the same transaction as each state change; a recount of the rows agrees with
them after every kind of change, and after several processes changed the queue at once.
"""

from __future__ import annotations

from planes import PlaneEnv

from dreamlake.lakeshore.types import STATES

HOUR = 3600.0


def _counts(plane: PlaneEnv, queue: str) -> dict[str, int]:
    q = plane.queue(queue)
    return {s: q.count(s) for s in STATES if q.count(s)}


def test_counts_follow_every_kind_of_state_change(plane: PlaneEnv) -> None:
    q = plane.queue("counted")
    ids = q.submit_many([{"i": i} for i in range(30)])
    keyed = q.submit({"k": 1}, key="once")
    assert q.submit({"k": 1}, key="once") == keyed  # an idempotent resubmit counts once
    jobs = [q.claim() for _ in range(11)]
    assert all(j is not None for j in jobs)
    claimed = [j for j in jobs if j is not None]
    assert len(q) == 20 and q.count("running") == 11

    for job in claimed[:4]:
        q.ack(job, "ok")
    for job in claimed[4:6]:
        q.nack(job, error="again", retry=True)  # back to queued, after a backoff
    for job in claimed[6:8]:
        q.nack(job, error="no", retry=False)
    assert plane.dispatch.release(claimed[8].id, claimed[8].lease)
    plane.dispatch.end(claimed[9].id, claimed[9].lease, state="killed", error="killed")
    cancelled = [i for i in ids[20:23] if q.cancel(i)]
    plane.dispatch.retry(claimed[7].id)  # failed -> queued

    assert len(cancelled) == 3
    assert _counts(plane, "counted") == {
        "queued": 31 - 11 + 2 + 1 - 3 + 1,
        "running": 1,
        "succeeded": 4,
        "failed": 1,
        "cancelled": 3,
        "killed": 1,
    }
    stats = plane.dispatch.stats("counted")
    assert (stats["pending"], stats["running"]) == (21, 1)
    assert plane.recount() == []

    trimmed = plane.dispatch.trim_retention(invocations_older_than_s=0)  # type: ignore[attr-defined]

    assert trimmed.invocations == 9
    assert _counts(plane, "counted") == {"queued": 21, "running": 1}
    assert plane.recount() == []


def test_counts_stay_exact_when_processes_change_a_queue_at_once(plane: PlaneEnv) -> None:
    per_peer = 40
    with plane.extra_peers(2) as extra:
        peers = [plane.peer, *extra]
        running = [p.start("churn", queue="churned", n=per_peer) for p in peers]
        submitted = sum(int(r.result(timeout=120.0)) for r in running)

    counts = _counts(plane, "churned")
    assert submitted == per_peer * len(peers)
    assert sum(counts.values()) == submitted
    assert counts.get("succeeded", 0) > 0 and counts.get("cancelled", 0) > 0
    assert plane.recount() == []
