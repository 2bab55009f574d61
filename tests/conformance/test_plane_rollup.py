"""The dashboard's completion rollup on every plane (issue 17, item 3): the throughput and latency
figures a snapshot reads from the rollup the store keeps as jobs end agree with a scan over the
invocations they summarise: completions and failures exactly, per bucket and per window, and
each percentile within the rollup bin that holds the exact one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from planes import PlaneEnv

from dreamlake.lakeshore.plane.store import SqlStore
from dreamlake.lakeshore.server.routes_dashboard import bin_bounds, snapshot

WINDOW_S = 600.0
STEP_S = 5.0


@contextmanager
def _store(plane: PlaneEnv) -> Iterator[SqlStore]:
    """The store behind the plane: the dispatch's own, or an HTTP plane's server's."""
    store = getattr(plane.dispatch, "store", None)
    if store is not None:
        yield store
        return
    from dreamlake.lakeshore.plane.dispatch import open_store

    assert plane.store_url is not None, f"{plane.name} names no store"
    opened = open_store(plane.store_url)
    try:
        yield opened
    finally:
        opened.close()


def _exact(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _within_bin(reported: float | None, exact: float | None) -> bool:
    """Whether the rollup's figure is the midpoint of a bin that holds the exact value."""
    if exact is None or reported is None:
        return reported is exact
    digits = len(str(int(exact * 1e6)))
    lead = int(str(int(exact * 1e6))[:2])
    low, high = bin_bounds(digits * 100 + lead)
    return low <= exact < high + 1e-9 and math.isclose(reported, (low + high) / 2)


def _scan(rows: list[dict[str, Any]], since: float, n: int) -> dict[str, Any]:
    """The figures as the dashboard computed them before the rollup: from every completion."""
    done, failed = [0] * n, [0] * n
    latencies: list[float] = []
    waits: list[float] = []
    for r in rows:
        i = min(n - 1, max(0, int((math.floor(r["finished_at"]) - since) // STEP_S)))
        done[i] += 1
        if r["state"] == "succeeded":
            latencies.append(max(0.0, r["finished_at"] - r["created_at"]))
        else:
            failed[i] += 1
        if r["started_at"] is not None:
            waits.append(max(0.0, r["started_at"] - r["created_at"]))
    return {
        "completed": done,
        "failed": failed,
        "p50": _exact(latencies, 0.5),
        "p95": _exact(latencies, 0.95),
        "wait_p50": _exact(waits, 0.5),
    }


def test_rollup_figures_match_a_scan_of_the_invocations(plane: PlaneEnv) -> None:
    # given: endings of every kind in two queues (succeeded, failed, cancelled unstarted, killed)
    fast, slow = plane.queue("rolled-fast"), plane.queue("rolled-slow")
    fast.submit_many([{"i": i} for i in range(24)])
    slow_ids = slow.submit_many([{"i": i} for i in range(8)])
    for _ in range(20):
        job = fast.claim()
        assert job is not None
        fast.ack(job, "ok")
    for _ in range(3):
        job = fast.claim()
        assert job is not None
        fast.nack(job, error="no", retry=False)
    for _ in range(5):
        job = slow.claim()
        assert job is not None
        slow.ack(job, "ok")
    job = slow.claim()
    assert job is not None
    plane.dispatch.end(job.id, job.lease, state="killed", error="killed")
    assert slow.cancel(slow_ids[-1])

    # when: one snapshot, and the scan over the same window
    with _store(plane) as store:
        ns = plane.dispatch.namespace  # type: ignore[attr-defined]
        snap = snapshot(store, ns, WINDOW_S, STEP_S)
        since, n = snap["window"]["since"], snap["window"]["points"]
        finished = store.finished_since(ns, math.floor(since))

    # then: the same figures, queue by queue
    queues = {q["name"]: q for q in snap["queues"]}
    for name, ended, bad in (("rolled-fast", 23, 3), ("rolled-slow", 7, 2)):
        got = queues[name]
        want = _scan([r for r in finished if r["queue"] == name], since, n)
        assert (got["window"]["completed"], got["window"]["failed"]) == (ended, bad)
        assert got["completed"] == want["completed"]
        assert got["failed"] == want["failed"]
        assert _within_bin(got["window"]["latency_p50"], want["p50"])
        assert _within_bin(got["window"]["latency_p95"], want["p95"])
        assert _within_bin(got["window"]["wait_p50"], want["wait_p50"])
    assert snap["sampled"] is False


def test_retention_drops_rollup_rows_past_their_age(plane: PlaneEnv) -> None:
    # given: a few endings counted in the rollup
    q = plane.queue("rolled-trim")
    q.submit_many([{"i": i} for i in range(3)])
    for _ in range(3):
        job = q.claim()
        assert job is not None
        q.ack(job, "ok")
    with _store(plane) as store:
        ns = plane.dispatch.namespace  # type: ignore[attr-defined]
        assert sum(int(r["n"]) for r in store.rollup_since(ns, 0) if r["kind"] == "latency") == 3

        # when: retention runs with the rows older than its rollup age (0 s: all of them)
        store.trim_retention(ns=ns, rollup_older_than_s=0, now=math.floor(time.time()) + 2)

        # then: the rollup is empty, and the snapshot shows no completions
        assert store.rollup_since(ns, 0) == []
        snap = snapshot(store, ns, WINDOW_S, STEP_S)
        (row,) = [r for r in snap["queues"] if r["name"] == "rolled-trim"]
        assert row["window"]["completed"] == 0 and row["depth"]["succeeded"] == 3


def test_endings_from_scheduled_and_waiting_are_counted(plane: PlaneEnv) -> None:
    # given: a delayed job, a dependent, its own dependent, and one stored cancelled at submit
    q = plane.queue("rolled-live")
    delayed = q.submit({"i": 0}, delay_s=3600)
    parent = q.submit({"i": 1})
    child = q.submit({"i": 2}, after=[parent])
    q.submit({"i": 3}, after=[child])
    waiting = q.submit({"i": 4}, after=[parent])

    # when: the delayed one and a waiting one are cancelled, and the parent fails (cancelling
    # the chain under it), then a dependent of the failed parent is submitted
    assert q.cancel(delayed) and q.cancel(waiting)
    job = q.claim()
    assert job is not None and job.id == parent
    q.nack(job, error="no", retry=False)
    q.submit({"i": 5}, after=[parent])

    # then: six endings, all counted as failures, as the rows say
    with _store(plane) as store:
        ns = plane.dispatch.namespace  # type: ignore[attr-defined]
        snap = snapshot(store, ns, WINDOW_S, STEP_S)
        since, n = snap["window"]["since"], snap["window"]["points"]
        finished = store.finished_since(ns, math.floor(since))
    (got,) = [r for r in snap["queues"] if r["name"] == "rolled-live"]
    want = _scan([r for r in finished if r["queue"] == "rolled-live"], since, n)
    assert (got["window"]["completed"], got["window"]["failed"]) == (6, 6)
    assert got["failed"] == want["failed"] and got["completed"] == want["completed"]
