"""The durable floor of one `q.call`: its fsyncs, timed raw on the same disk in the same run.

A call at synchronous=FULL makes two durable commits: the submit (its id is durable before it
returns) and the ack (a result is durable before the worker hears it was taken). The claim
between them commits without an fsync, carried to disk by the next durable commit. So the
floor is two small SQLite WAL commits at FULL on the disk the benchmark's store uses, one after
the other, and on Postgres two one-row commits with synchronous_commit=on: no store that keeps
those promises can answer a call faster, whatever its protocol.
"""

from __future__ import annotations

import sqlite3
import tempfile
import time
from pathlib import Path

from .common import POSTGRES_URL, Measurement, Settings, pct
from .lakeshore_runs import FULL

#: Durable commits on a `q.call`'s path.
COMMITS_PER_CALL = 2
SAMPLES = 400
#: Commits before timing: the store under the benchmark has a WAL that is already as long as it
#: grows (SQLite checkpoints at 1,000 pages and then rewrites the file in place), and a first
#: append that grows the file costs a metadata sync that no steady-state commit pays.
WARMUP = 1500


def _sqlite_commit_pairs(folder: Path, n: int) -> list[float]:
    db = sqlite3.connect(folder / f"floor-{time.monotonic_ns()}.db", isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)")
        for _ in range(WARMUP):
            db.execute("INSERT INTO t (v) VALUES (?)", (b"x" * 64,))  # autocommit: one each
        out = []
        for _ in range(n):
            start = time.perf_counter()
            for _ in range(COMMITS_PER_CALL):
                db.execute("BEGIN IMMEDIATE")
                db.execute("INSERT INTO t (v) VALUES (?)", (b"x" * 64,))
                db.execute("COMMIT")
            out.append((time.perf_counter() - start) * 1000)
        return out
    finally:
        db.close()


def _postgres_commit_pairs(n: int) -> list[float]:
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = on")
        conn.execute("CREATE TEMP TABLE floor_t (id serial PRIMARY KEY, v bytea)")
        out = []
        for _ in range(n):
            start = time.perf_counter()
            for _ in range(COMMITS_PER_CALL):
                conn.execute("INSERT INTO floor_t (v) VALUES (%s)", (b"x" * 64,))
            out.append((time.perf_counter() - start) * 1000)
        return out


def measure(s: Settings) -> list[Measurement]:
    n = SAMPLES // 4 if s.quick else SAMPLES
    note = f"{COMMITS_PER_CALL} commits, as on a q.call's path"
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as tmp:
        sqlite = [_sqlite_commit_pairs(Path(tmp), n) for _ in range(s.reps)]
    out = [
        Measurement(
            "rpc",
            "p50",
            "floor: 2 durable sqlite commits",
            [pct(r, 50) for r in sqlite],
            "ms",
            FULL,
            note,
            n,
        )
    ]
    pg = [_postgres_commit_pairs(n) for _ in range(s.reps)]
    out.append(
        Measurement(
            "rpc",
            "p50",
            "floor: 2 durable postgres commits",
            [pct(r, 50) for r in pg],
            "ms",
            "synchronous_commit=on",
            note,
            n,
        )
    )
    return out
