"""The durable floor of one `q.call`: its fsyncs, timed raw on the same disk in the same run.

A call's answer waits for every fsync on its path. On SQLite at synchronous=FULL that is one:
the ack's commit (a result is durable before the worker hears it was taken). The submit of a
submit-and-wait commits without one and owes it; the ack's fsync flushes the same log, the
submit's frames first, and the answer that names the id waits for it (`Connector.sync`). The
claim between them promised no fsync. So the SQLite floor is one small WAL commit at FULL on
the disk the benchmark's store uses. On Postgres the submit and the ack each wait for their WAL
flush at COMMIT: two one-row commits with synchronous_commit=on. No store that keeps those
promises can answer a call faster, whatever its protocol.
"""

from __future__ import annotations

import sqlite3
import tempfile
import time
from pathlib import Path

from .common import POSTGRES_URL, Measurement, Settings, pct
from .lakeshore_runs import FULL

#: Durable commits on a `q.call`'s path, per store.
SQLITE_COMMITS_PER_CALL = 1
POSTGRES_COMMITS_PER_CALL = 2
SQLITE_FLOOR = f"floor: {SQLITE_COMMITS_PER_CALL} durable sqlite commit"
POSTGRES_FLOOR = f"floor: {POSTGRES_COMMITS_PER_CALL} durable postgres commits"
SAMPLES = 400
#: Commits before timing: the store under the benchmark has a WAL that is already as long as it
#: grows (SQLite checkpoints at 1,000 pages and then rewrites the file in place), and a first
#: append that grows the file costs a metadata sync that no steady-state commit pays.
WARMUP = 1500


def _sqlite_commits(folder: Path, n: int) -> list[float]:
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
            for _ in range(SQLITE_COMMITS_PER_CALL):
                db.execute("BEGIN IMMEDIATE")
                db.execute("INSERT INTO t (v) VALUES (?)", (b"x" * 64,))
                db.execute("COMMIT")
            out.append((time.perf_counter() - start) * 1000)
        return out
    finally:
        db.close()


def _postgres_commits(n: int) -> list[float]:
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = on")
        conn.execute("CREATE TEMP TABLE floor_t (id serial PRIMARY KEY, v bytea)")
        out = []
        for _ in range(n):
            start = time.perf_counter()
            for _ in range(POSTGRES_COMMITS_PER_CALL):
                conn.execute("INSERT INTO floor_t (v) VALUES (%s)", (b"x" * 64,))
            out.append((time.perf_counter() - start) * 1000)
        return out


def measure(s: Settings) -> list[Measurement]:
    n = SAMPLES // 4 if s.quick else SAMPLES
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as tmp:
        sqlite = [_sqlite_commits(Path(tmp), n) for _ in range(s.reps)]
    pg = [_postgres_commits(n) for _ in range(s.reps)]
    return [
        Measurement(
            "rpc",
            "p50",
            SQLITE_FLOOR,
            [pct(r, 50) for r in sqlite],
            "ms",
            FULL,
            f"{SQLITE_COMMITS_PER_CALL} commit, as on a q.call's path",
            n,
        ),
        Measurement(
            "rpc",
            "p50",
            POSTGRES_FLOOR,
            [pct(r, 50) for r in pg],
            "ms",
            "synchronous_commit=on",
            f"{POSTGRES_COMMITS_PER_CALL} commits, as on a q.call's path",
            n,
        ),
    ]
