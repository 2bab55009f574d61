"""Depth counters (issue 17, item 1): what `count()` costs at depth, and what keeping the counters
costs writers.

SQLite: seed a queue with `submit_many` in batches of 1,000 (timed, with the rate of the first
and the last 100k), then time `count()` (the counters: migration 18) and the COUNT over rows it
replaced, in the same run, at depth 0 and at the seeded depth. Also what the triggers cost a
batch submit: the same batches into a plane with and without them.
Postgres: 8 submitter processes, one job per transaction, all on one queue for a fixed time, with
the counters striped over 8 rows (the default), over 1 row, and with no counters at all (triggers
off for the session: session_replication_role=replica, superuser only); submits/s and how often
a submitter was seen waiting on a lock (pg_stat_activity sampled every 10 ms).
This is a benchmark, not a test: it asserts nothing.

Run: .venv/bin/python -m bench.depth_counts [--rows 1000000] [--url URL] [--seconds 5]
"""

from __future__ import annotations

import argparse
import multiprocessing
import multiprocessing.queues
import multiprocessing.synchronize
import os
import sqlite3
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import dreamlake.lakeshore as dls

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
BATCH = 1000
QUEUE = "deep"
#: The statement `count()` ran before the counters (queries.sql, count_state, until migration
#: 18), kept here only to time it beside its replacement.
OLD_COUNT = "SELECT count(*) AS n FROM invocations WHERE namespace = ? AND queue = ? AND state = ?"
TRIGGERS = ("invocations_count_insert", "invocations_count_update", "invocations_count_delete")


def median_ms(fn: Callable[[], object], repeat: int = 21) -> float:
    fn()  # warm the page cache and the statement cache
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def count_both(path: Path, q: dls.SyncQueue) -> tuple[float, float, int, int]:
    """(counters ms, COUNT over rows ms, their two answers) on the plane at `path`."""
    conn = sqlite3.connect(path)

    def old() -> int:
        return int(conn.execute(OLD_COUNT, ("default", QUEUE, "queued")).fetchone()[0])

    try:
        return median_ms(q.count), median_ms(old), q.count(), old()
    finally:
        conn.close()


def seed(q: dls.SyncQueue, rows: int) -> tuple[float, list[float]]:
    """Seconds to submit `rows` in batches of BATCH, and the rate of each 100k."""
    rates, start, mark = [], time.perf_counter(), time.perf_counter()
    payloads = [None] * BATCH
    for done in range(BATCH, rows + 1, BATCH):
        q.submit_many(payloads)
        if done % 100_000 == 0:
            now = time.perf_counter()
            rates.append(100_000 / (now - mark))
            mark = now
    return time.perf_counter() - start, rates


def sqlite_depth(rows: int, workdir: Path) -> None:
    path = workdir / "deep.db"
    with dls.Dispatch(path) as plane:
        q = dls.SyncQueue(QUEUE, dispatch=plane)
        new0, old0, n0, m0 = count_both(path, q)
        print(
            f"sqlite count() at depth 0: counters {new0:.3f} ms, COUNT over rows {old0:.3f} ms "
            f"(answers {n0}, {m0})"
        )
        took, rates = seed(q, rows)
        size = path.stat().st_size + Path(f"{path}-wal").stat().st_size
        first, last = (f"{rates[0]:,.0f}", f"{rates[-1]:,.0f}") if rates else ("-", "-")
        print(
            f"sqlite seed: {rows:,} jobs by submit_many({BATCH}) in {took:.1f} s "
            f"({rows / took:,.0f}/s; first 100k {first}/s, last 100k {last}/s), "
            f"{size / rows:.0f} bytes on disk per job"
        )
        new1, old1, n1, m1 = count_both(path, q)
        print(
            f"sqlite count() at depth {rows:,}: counters {new1:.3f} ms, "
            f"COUNT over rows {old1:.3f} ms (answers {n1:,}, {m1:,})"
        )
        stats = median_ms(lambda: plane.stats(QUEUE), repeat=11)
        print(f"sqlite stats() at depth {rows:,}: {stats:.3f} ms")


def trigger_cost(rows: int, workdir: Path) -> None:
    """Batch submits into a plane with the counting triggers and into one without."""
    for label, drop in (("with counters", False), ("without counters", True)):
        path = workdir / f"cost-{int(drop)}.db"
        with dls.Dispatch(path) as plane:
            if drop:
                conn = sqlite3.connect(path)
                for name in TRIGGERS:
                    conn.execute(f"DROP TRIGGER {name}")
                conn.close()
            took, _ = seed(dls.SyncQueue(QUEUE, dispatch=plane), rows)
        print(f"sqlite submit_many({BATCH}) x {rows // BATCH}, {label}: {rows / took:,.0f} jobs/s")


# -- Postgres: 8 concurrent submitters ----------------------------------------------------------


def submitter(
    url: str,
    seconds: float,
    ready: multiprocessing.synchronize.Semaphore,
    go: multiprocessing.synchronize.Event,
    out: multiprocessing.queues.Queue[int],
) -> None:
    """One process: single submits (one transaction each) until `seconds` pass."""
    with dls.Dispatch(url) as plane:
        q = dls.SyncQueue(QUEUE, dispatch=plane)
        q.submit(None)  # connect, and make the queue
        ready.release()
        go.wait()
        n, end = 0, time.monotonic() + seconds
        while time.monotonic() < end:
            q.submit(None)
            n += 1
        out.put(n)


def sample_waits(url: str, stop: threading.Event, seen: list[tuple[int, int]]) -> None:
    """(backends running a submit, of them waiting on a lock) every 10 ms."""
    import psycopg

    from dreamlake.lakeshore.plane.postgres import parse_url

    with psycopg.connect(parse_url(url)[0], autocommit=True) as conn:
        while not stop.is_set():
            row = conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE wait_event_type = 'Lock') "
                "FROM pg_stat_activity WHERE state = 'active' AND pid <> pg_backend_pid() "
                "AND query LIKE '%INSERT INTO invocations%'"
            ).fetchone()
            if row is not None:
                seen.append((int(row[0]), int(row[1])))
            time.sleep(0.01)


def concurrent_submits(url: str, procs: int, seconds: float) -> tuple[float, float]:
    """(submits/s over `procs` processes, share of sampled submits waiting on a lock)."""
    ctx = multiprocessing.get_context("spawn")
    ready, go, out = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    workers = [
        ctx.Process(target=submitter, args=(url, seconds, ready, go, out)) for _ in range(procs)
    ]
    for w in workers:
        w.start()
    for _ in workers:
        ready.acquire()
    stop, seen = threading.Event(), list[tuple[int, int]]()
    sampler = threading.Thread(target=sample_waits, args=(url, stop, seen))
    sampler.start()
    start = time.perf_counter()
    go.set()
    total = sum(out.get(timeout=seconds + 60) for _ in workers)
    took = time.perf_counter() - start
    stop.set()
    sampler.join()
    for w in workers:
        w.join()
    active = sum(a for a, _ in seen)
    return total / took, (sum(w for _, w in seen) / active) if active else 0.0


def postgres_contention(url: str, procs: int, seconds: float) -> None:
    from dreamlake.lakeshore.plane.postgres import scratch_schema

    variants = (
        ("counters striped over 8 rows", ""),
        ("counters on 1 row", "-c lakeshore.count_stripes=1"),
        ("no counters (triggers off)", "-c session_replication_role=replica"),
    )
    for label, options in variants:
        with scratch_schema(url, "bench_depth") as scoped:
            dls.Dispatch(scoped).close()  # migrate once, before the submitters race to
            target = f"{scoped}&options={quote(options)}" if options else scoped
            rate, waiting = concurrent_submits(target, procs, seconds)
            with dls.Dispatch(scoped) as plane:
                exact = not plane.store.recount_check()
        print(
            f"postgres {procs} submitters, {label}: {rate:,.0f} submits/s, "
            f"{waiting:.1%} of sampled submits waiting on a lock"
            + ("" if options.startswith("-c session") else f", recount exact: {exact}")
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="SQLite depth to seed")
    parser.add_argument("--cost-rows", type=int, default=100_000, help="rows per trigger-cost run")
    parser.add_argument("--url", default=os.environ.get("LAKESHORE_TEST_POSTGRES_URL", DEFAULT_URL))
    parser.add_argument("--procs", type=int, default=8, help="concurrent Postgres submitters")
    parser.add_argument("--seconds", type=float, default=5.0, help="per Postgres variant")
    parser.add_argument("--skip", default="", help="comma-separated: sqlite,cost,postgres")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    with tempfile.TemporaryDirectory(prefix="lakeshore-depth-") as tmp:
        if "sqlite" not in skip:
            sqlite_depth(args.rows, Path(tmp))
        if "cost" not in skip:
            trigger_cost(args.cost_rows, Path(tmp))
    if "postgres" not in skip:
        postgres_contention(args.url, args.procs, args.seconds)


if __name__ == "__main__":
    main()
