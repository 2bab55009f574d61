"""The embedded SQLite plane beside SqliteHuey and raw SQLite inserts of the same rows.

Submit: one durable commit per job on each system (Lakeshore's batch submit shown too).
Drain: Lakeshore claim + ack (two commits: the job is leased, then settled, so a crash in
between loses nothing) against Huey's dequeue + execute (one delete: at-most-once). Batched:
what a daemon with --prefetch does, claim_many(64) then ack_many of the results (two commits
per 64 jobs, each job still leased and fenced).
Raw floor: INSERT of the same row with its own commit, same pragmas.
Run: .venv/bin/python -m bench.sqlite_plane [--jobs N]
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane.store import new_id
from dreamlake.lakeshore.types import Ack, ClaimArgs

from .report import Row, render


def timed(n: int, fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return n / (time.perf_counter() - start)


def raw_inserts(path: Path, n: int, durable: bool) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}")
    conn.execute("CREATE TABLE t (id TEXT PRIMARY KEY, queue TEXT, state TEXT, payload BLOB)")
    payloads = [dls.encode({"i": i}) for i in range(n)]

    def run() -> None:
        for p in payloads:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t VALUES (?, 'bench', 'queued', ?)", (new_id(), p))
            conn.execute("COMMIT")

    rate = timed(n, run)
    conn.close()
    return rate


BATCH = 64


def lakeshore(path: Path, n: int, durable: bool) -> tuple[float, float, float, float]:
    with dls.Dispatch(path, durable=durable) as plane:
        q = dls.SyncQueue("bench", dispatch=plane)
        submit = timed(n, lambda: [q.submit({"i": i}) for i in range(n)] and None)

        def drain() -> None:
            for _ in range(n):
                job = q.claim()
                assert job is not None
                q.ack(job)

        drained = timed(n, drain)
        batch = timed(
            n,
            lambda: (
                [q.submit_many([{"i": i} for i in range(500)]) for _ in range(n // 500)] and None
            ),
        )

        def drain_batched() -> None:
            left = n // 500 * 500
            while left:
                claims = plane.claim_many(ClaimArgs(["bench"], "bench", limit=BATCH))
                assert claims
                acks = [Ack(c.id, c.lease, dls.encode(noop(dls.decode(c.payload)))) for c in claims]
                errors = plane.ack_many(acks)
                assert not any(errors)
                left -= len(claims)

        batched = timed(n // 500 * 500, drain_batched)
    return submit, drained, batch, batched


def noop(payload: object) -> None:
    return None


def huey(path: Path, n: int, durable: bool) -> tuple[float, float]:
    from huey import SqliteHuey

    h = SqliteHuey(filename=str(path), fsync=durable)

    @h.task()
    def noop(i: int) -> None:
        return None

    submit = timed(n, lambda: [noop(i) for i in range(n)] and None)

    def drain() -> None:
        for _ in range(n):
            task = h.dequeue()
            assert task is not None
            h.execute(task)

    drained = timed(n, drain)
    h.storage.close()
    return submit, drained


def measure(n: int) -> list[Row]:
    rows: list[Row] = []
    for durable in (True, False):
        mode = "FULL" if durable else "NORMAL"
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            raw = raw_inserts(d / "raw.db", n, durable)
            ls_submit, ls_drain, ls_batch, ls_batched = lakeshore(d / "ls.db", n, durable)
            h_submit, h_drain = huey(d / "huey.db", n, durable)
        rows += [
            Row(f"submit, synchronous={mode}", "raw sqlite insert", raw, "ops/s", "the floor"),
            Row(f"submit, synchronous={mode}", "huey (SqliteHuey)", h_submit, "ops/s"),
            Row(f"submit, synchronous={mode}", "lakeshore", ls_submit, "ops/s"),
            Row(f"submit, synchronous={mode}", "lakeshore batch 500", ls_batch, "ops/s"),
            Row(
                f"drain, synchronous={mode}",
                "huey (SqliteHuey)",
                h_drain,
                "ops/s",
                "dequeue deletes: at-most-once",
            ),
            Row(
                f"drain, synchronous={mode}", "lakeshore", ls_drain, "ops/s", "claim + ack, leased"
            ),
            Row(
                f"drain, synchronous={mode}",
                f"lakeshore batched {BATCH}",
                ls_batched,
                "ops/s",
                f"claim_many({BATCH}) + ack_many: a daemon with --prefetch",
            ),
        ]
    return rows


BASELINES = {
    "submit, synchronous=FULL": "huey (SqliteHuey)",
    "submit, synchronous=NORMAL": "huey (SqliteHuey)",
    "drain, synchronous=FULL": "huey (SqliteHuey)",
    "drain, synchronous=NORMAL": "huey (SqliteHuey)",
}


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=2000)
    args = parser.parse_args(argv)
    rows = measure(args.jobs)
    render(f"Embedded SQLite plane, {args.jobs} jobs", rows, BASELINES)
    for mode in ("FULL", "NORMAL"):
        group = [r for r in rows if r.group == f"submit, synchronous={mode}"]
        raw = next(r for r in group if r.system == "raw sqlite insert")
        ls = next(r for r in group if r.system == "lakeshore")
        print(f"synchronous={mode}: lakeshore submit is {raw.value / ls.value:.2f}x the raw floor")
    return rows


if __name__ == "__main__":
    main()
