"""Suite `depth` (issue 34): a claim that says what it has free, at depth, against a plain one.

A daemon that places jobs sends what it has free with every claim, and the store hands it only
a job that fits (the claim's `fits` fragment). That must not make a deep queue slow: one SQLite
plane is seeded with N queued no-ops (1,000,000 by default, BENCH_DEPTH_ROWS; 2,000 under
--quick) of mixed shapes, a batch of 1,000 each, cycling through SHAPES: no request, one GPU, half
a GPU, two GPUs, eight H100s, one GPU of 80 GB, four CPUs, and one A100 that the claimer never
has. Then claim+ack one job at a time, median ms, three ways, at depth 0 and at depth N:

- plain: no `free` (any job), as a daemon without GPUs claims;
- 8 H100 free: a declared 8-GPU box with nothing running (every shape but the A100 fits);
- half a GPU free: a box with one H100 half used (only the CPU-only, four-CPU and half-GPU
  jobs fit: the claim must pass over the rest).

Each figure at depth N carries its ratio to the plain claim at the same depth; the issue's
target is within 1.5x.

Run alone: .venv/bin/python -m bench --only depth --systems resource
       or: .venv/bin/python -m bench.depth_resources [--rows N] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.daemon.inventory import Gpu
from dreamlake.lakeshore.daemon.placement import Placer
from dreamlake.lakeshore.plane.dispatch import Dispatch
from dreamlake.lakeshore.types import Ack, ClaimArgs

from .common import Measurement, Settings, say
from .depth import BATCH, TARGET_RATIO, sqlite_rows

QUEUE = "shapes"
SYSTEM = "lakeshore sqlite, claims with resources"
#: The requests the queue is seeded with, a batch of each in turn.
SHAPES: tuple[dict[str, Any] | None, ...] = (
    None,
    {"gpus": 1},
    {"gpus": 0.5},
    {"gpus": 2},
    {"gpus": 8, "gpu_type": "H100"},
    {"gpus": 1, "gpu_memory_gb": 80},
    {"cpus": 4},
    {"gpus": 1, "gpu_type": "A100"},
)
#: Claim+ack pairs timed per figure.
CALLS = 300
QUICK_CALLS = 50


def _gpus(n: int) -> list[Gpu]:
    return [
        Gpu(index=i, uuid=f"bench-{i}", name="NVIDIA H100 80GB HBM3", memory_mb=81559)
        for i in range(n)
    ]


def frees() -> dict[str, dict[str, Any] | None]:
    """What each kind of claimer says it has free, as its daemon's `Placer` says it."""
    idle = Placer(_gpus(8), cpus=96.0, memory_gb=1024.0)
    half = Placer(_gpus(1), cpus=8.0, memory_gb=64.0)
    assert half.place("held", {"gpus": 0.5}) is not None
    return {"plain": None, "8 H100 free": idle.free(), "half a GPU free": half.free()}


def seed(q: dls.SyncQueue, rows: int) -> None:
    for i, done in enumerate(range(0, rows, BATCH)):
        q.submit_many([0] * min(BATCH, rows - done), resources=SHAPES[i % len(SHAPES)])


def claim_ack_ms(plane: Dispatch, free: dict[str, Any] | None, calls: int) -> float:
    """Median ms of one claim (of one job, with `free`) and its ack."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        got = plane.claim_many(ClaimArgs([QUEUE], "bench", free=free))
        if not got:
            break
        plane.ack_many([Ack(got[0].id, got[0].lease, None)])
        times.append((time.perf_counter() - start) * 1000)
    if not times:
        raise RuntimeError(f"no job fitted {free!r}")
    return statistics.median(times)


def measure_at(depth: int, calls: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="lakeshore-depth-res-") as scratch:
        plane = Dispatch(str(Path(scratch) / "lakeshore.db"))
        try:
            q = dls.SyncQueue(QUEUE, dispatch=plane)
            # Depth 0 still needs jobs to claim: as many of each shape as the calls take.
            seed(q, depth if depth else calls * len(SHAPES) * 2)
            out = {}
            for label, free in frees().items():
                claim_ack_ms(plane, free, 5)  # warm the caches
                out[label] = claim_ack_ms(plane, free, calls)
            return out
        finally:
            plane.close()


def measure(s: Settings) -> list[Measurement]:
    rows = sqlite_rows(s)
    calls = QUICK_CALLS if s.quick else CALLS
    out: list[Measurement] = []
    results = {}
    for depth in (0, rows):
        say(f"[depth] {SYSTEM}: depth {depth:,}")
        results[depth] = measure_at(depth, calls)
        say(f"[depth] {SYSTEM}: depth {depth:,}: {results[depth]}")
    for depth, figures in results.items():
        plain = figures["plain"]
        for label, ms in figures.items():
            note = ""
            if label != "plain":
                ratio = ms / plain
                verdict = "met" if ratio <= TARGET_RATIO else "missed"
                note = f"{ratio:.2f}x the plain claim (target {TARGET_RATIO}x): {verdict}"
            out.append(
                Measurement(
                    "depth",
                    f"claim+ack, {label}",
                    f"{SYSTEM}, depth {depth:,}",
                    [ms],
                    "ms",
                    note=note,
                    n=calls,
                )
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=None, help="depth (default 1M)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    settings = Settings.make(args.quick)
    if args.rows is not None:
        import os

        os.environ["BENCH_DEPTH_ROWS"] = str(args.rows)
    for m in measure(settings):
        print(f"{m.system:55} {m.metric:30} {m.values[0]:8.3f} ms  {m.note}")


if __name__ == "__main__":
    main()
