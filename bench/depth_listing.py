"""Listings at depth (issue 17, item 2): `jobs ls` and the SDK's listing, empty and 1M deep.

Seeds one queue ("deep") of the embedded SQLite plane with no-op jobs (submit_many, batches of
1,000), then times the SDK listing (`plane.invocations`, 20 rows) for each filter the CLI offers
(none, queue, state, both), first page and a page `--rows` deep (`before=` the id just above
the 20 oldest), and the wall time of `lakeshore jobs ls --queue deep --limit 20`. Each figure
is the median of `--repeat` runs (the CLI's: best of 5). Run it at depth 0 and at depth N to see
whether a listing's cost grows with the queue.

Run: .venv/bin/python -m bench.depth_listing [--rows 1000000] [--home DIR]
A `--home` already seeded to `--rows` is reused, so one seed serves several runs (and runs of
two versions of the code: the newer one migrates the file when it opens it).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import dreamlake.lakeshore as dls

QUEUE = "deep"
BATCH = 1_000
PAGE = 20
FILTERS: dict[str, dict[str, str]] = {
    "none": {},
    "queue": {"queue": QUEUE},
    "state": {"state": "queued"},
    "queue+state": {"queue": QUEUE, "state": "queued"},
}


def seed(path: Path, rows: int) -> float:
    """Fill the queue up to `rows` jobs; the seconds it took (0 when already there)."""
    with dls.Dispatch(path) as plane:
        q = dls.SyncQueue(QUEUE, dispatch=plane)
        have = _rows(path)
        start = time.perf_counter()
        while have < rows:
            n = min(BATCH, rows - have)
            q.submit_many([None] * n)
            have += n
        return time.perf_counter() - start if rows else 0.0


def _rows(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM invocations").fetchone()[0])


def _deep_id(path: Path) -> str | None:
    """The id above the PAGE oldest: `before=` it is the last page (bench only: OFFSET here)."""
    with sqlite3.connect(path) as conn:
        row = conn.execute(
            "SELECT id FROM invocations ORDER BY id LIMIT 1 OFFSET ?", (PAGE,)
        ).fetchone()
    return None if row is None else str(row[0])


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def sdk_listings(path: Path, repeat: int) -> dict[str, float]:
    deep = _deep_id(path)
    out: dict[str, float] = {}
    with dls.Dispatch(path) as plane:
        for name, filters in FILTERS.items():
            out[f"sdk first page, {name}"] = median_ms(
                lambda f=filters: plane.invocations(limit=PAGE, **f), repeat
            )
            if deep is not None:
                out[f"sdk deep page, {name}"] = median_ms(
                    lambda f=filters: plane.invocations(limit=PAGE, before=deep, **f), repeat
                )
    return out


def cli_ms(home: Path) -> float:
    """Best of 5 wall times of `lakeshore jobs ls --queue deep --limit 20`, start-up included."""
    exe = Path(sys.executable).with_name("lakeshore")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESHORE_")}
    env["LAKESHORE_HOME"] = str(home)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run(
            [str(exe), "jobs", "ls", "--queue", QUEUE, "--limit", str(PAGE)],
            env=env,
            check=True,
            capture_output=True,
        )
        best = min(best, (time.perf_counter() - start) * 1000)
    return best


def run(home: Path, rows: int, repeat: int) -> None:
    home.mkdir(parents=True, exist_ok=True)
    path = home / "lakeshore.db"  # where `lakeshore` finds the box's plane under LAKESHORE_HOME
    took = seed(path, rows)
    if took:
        print(f"seeded {rows:,} jobs in {took:.1f} s ({rows / took:,.0f}/s)")
    print(f"depth {_rows(path):,}, {path.stat().st_size / 1e6:.0f} MB on disk")
    for name, ms in sdk_listings(path, repeat).items():
        print(f"  {name:<28} {ms:8.2f} ms")
    print(f"  {'lakeshore jobs ls --queue':<28} {cli_ms(home):8.1f} ms (best of 5, wall)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="depth to seed and measure")
    parser.add_argument("--home", type=Path, default=None, help="reuse this LAKESHORE_HOME")
    parser.add_argument("--repeat", type=int, default=21, help="runs per SDK figure")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lakeshore-depth-") as scratch:
        run(Path(scratch) / "empty", 0, args.repeat)
        run(args.home or Path(scratch) / "deep", args.rows, args.repeat)


if __name__ == "__main__":
    main()
