"""Suite `gangs`, the claim at depth (issue 47): what handing out a gang's parts costs with N
one-box no-ops queued, beside a one-box claim on the same plane in the same run.

SQLite at N = 1,000,000 (BENCH_DEPTH_ROWS), Postgres at 100,000 (BENCH_DEPTH_PG_ROWS, on the
shared server); 2,000 each under --quick. One queue is seeded with `submit_many` in batches of
1,000; then, each a median over `calls` rounds, embedded (the store's own statements, no
server in between):

- one-box claim, and its ack, with no gang queued (the baseline);
- one-box claim with a 2-node gang queued behind the N jobs: what a waiting gang adds to
  every claim of its queue (the probe for a queued gang, and the check that a job comes
  before it in the claim order);
- gang part claim: a 2-node gang at the head (priority 1), rank 0's claim (held) and rank 1's
  (the gang complete, started), and each part's ack (the last one ends the job).

The target is a gang part's claim within 1.5x of the one-box claim at the same depth.

Run alone: .venv/bin/python -m bench.gang_claim [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from dreamlake.lakeshore.plane.dispatch import Dispatch
from dreamlake.lakeshore.types import Claim, ClaimArgs, SubmitRequest

from .common import POSTGRES_URL, Measurement, Settings, say

QUEUE = "deep"
BATCH = 1000
SUITE = "gangs"
TARGET_RATIO = 1.5

T = TypeVar("T")


def _timed(fn: Callable[[], T]) -> tuple[float, T]:
    start = time.perf_counter()
    value = fn()
    return (time.perf_counter() - start) * 1000, value


def _seed(plane: Dispatch, rows: int) -> float:
    start = time.perf_counter()
    for done in range(0, rows, BATCH):
        plane.submit(QUEUE, [SubmitRequest(b"") for _ in range(min(BATCH, rows - done))])
    return time.perf_counter() - start


def _claim(plane: Dispatch, worker: str) -> tuple[float, Claim]:
    return _timed(lambda: plane.claim_many(ClaimArgs([QUEUE], worker))[0])


def single_round(plane: Dispatch) -> tuple[float, float]:
    """(claim ms, ack ms) of one one-box job (the queue's head)."""
    took, claim = _claim(plane, "w1")
    acked, _ = _timed(lambda: plane.ack(claim.id, claim.lease, None))
    return took, acked


def gang_round(plane: Dispatch) -> tuple[list[float], list[float]]:
    """([rank 0's claim ms, rank 1's], [their acks' ms]) of one 2-node gang at the head."""
    (inv_id,) = plane.submit(QUEUE, [SubmitRequest(b"", nodes=2, priority=1)])
    claims = [_claim(plane, w) for w in ("w1", "w2")]
    for _, part in claims:
        assert part.id == inv_id and part.gang is not None, "a part of the head gang"
    acks = [_timed(lambda p=part: plane.ack(inv_id, p.lease, None))[0] for _, part in claims]
    return [c for c, _ in claims], acks


def measure(store: str, rows: int, calls: int, system: str) -> list[Measurement]:
    plane = Dispatch(store)
    try:
        seeded = _seed(plane, rows + calls * 2)
        say(f"[gang claim] {system}: seeded {rows + calls * 2:,} jobs in {seeded:.1f} s")
        if store.startswith("postgres"):
            _analyze(store)
        singles = [single_round(plane) for _ in range(calls)]
        gangs = [gang_round(plane) for _ in range(calls)]
        plane.submit(QUEUE, [SubmitRequest(b"", nodes=2)])  # waits behind every one-box job
        behind = [single_round(plane)[0] for _ in range(calls)]
    finally:
        plane.close()
    claim = statistics.median(c for c, _ in singles)
    part = statistics.median(t for g in gangs for t in g[0])
    figures = {
        "one-box claim": ([c for c, _ in singles], ""),
        "one-box ack": ([a for _, a in singles], ""),
        "one-box claim, a gang waiting behind": (
            behind,
            f"{statistics.median(behind) / claim:.2f}x the one-box claim",
        ),
        "gang part claim (rank 0 held, rank 1 starts)": (
            [t for g in gangs for t in g[0]],
            f"{part / claim:.2f}x the one-box claim (target {TARGET_RATIO}x)",
        ),
        "gang part ack (the last ends the job)": ([t for g in gangs for t in g[1]], ""),
    }
    return [
        Measurement(SUITE, f"{name}, depth {rows:,}", system, [statistics.median(v)], "ms",
                    note=note, n=len(v))
        for name, (v, note) in figures.items()
    ]  # fmt: skip


def _analyze(url: str) -> None:
    """What autovacuum does after a bulk load, done now: this box's shared server runs with it
    off, and on the statistics of an empty table the planner reads a gang's row by walking
    the claim index (10 ms at 100k, where the primary key takes 0.1 ms)."""
    import psycopg
    from psycopg import sql

    from dreamlake.lakeshore.plane.postgres_connect import parse_url

    conninfo, schema = parse_url(url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        for table in ("invocations", "gangs", "gang_parts"):
            name = sql.Identifier(schema or "public", table)
            conn.execute(sql.SQL("ANALYZE {}").format(name))


def rows_for(s: Settings, kind: str) -> int:
    if s.quick:
        return 2000
    if kind == "postgres":
        return int(os.environ.get("BENCH_DEPTH_PG_ROWS", "100000"))
    return int(os.environ.get("BENCH_DEPTH_ROWS", "1000000"))


def sqlite(s: Settings) -> list[Measurement]:
    with tempfile.TemporaryDirectory(prefix="bench-gang-claim-") as home:
        store = str(Path(home) / "lakeshore.db")
        return measure(store, rows_for(s, "sqlite"), 50 if s.quick else 200, SQLITE)


def postgres(s: Settings) -> list[Measurement]:
    from dreamlake.lakeshore.plane.postgres import scratch_schema

    with scratch_schema(POSTGRES_URL, "bench_gang_claim") as url:
        return measure(url, rows_for(s, "postgres"), 50 if s.quick else 200, POSTGRES)


SQLITE = "lakeshore gang claim, embedded sqlite"
POSTGRES = "lakeshore gang claim, embedded postgres"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--skip-sqlite", action="store_true")
    args = parser.parse_args()
    s = Settings.make(args.quick)
    found = ([] if args.skip_sqlite else sqlite(s)) + ([] if args.skip_postgres else postgres(s))
    for m in found:
        print(f"{m.system:40} {m.metric:60} {m.median:8.3f} ms  {m.note}")


if __name__ == "__main__":
    main()
