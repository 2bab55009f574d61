"""Suite `lateness` (issue 36): how late a delayed job starts, with 100,000 others scheduled.

One SQLite plane (a file, synchronous=FULL, as the embedded default) holds N jobs scheduled an
hour ahead (100,000; 2,000 under --quick), submitted a batch of 1,000 at a time with `at=`. Then
PROBES jobs are submitted at once, due one every SPACING_S from two seconds on, and one worker
thread waits in a claim (`claim_many(..., wait_s=)`, as an idle daemon's claim waits) and acks
each job it gets. A probe's lateness is the moment its claim returned minus its due time; the
suite reports p50 and p99 (target: p99 under 50 ms), beside the floor measured in the same run:
how late a bare `threading.Event().wait(timeout)` wakes on this box (the timer under everything).

Run alone: .venv/bin/python -m bench --only lateness
       or: .venv/bin/python -m bench.lateness [--scheduled N] [--quick]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

from dreamlake.lakeshore import codec
from dreamlake.lakeshore.plane.dispatch import Dispatch
from dreamlake.lakeshore.types import Ack, SubmitRequest

from .common import Measurement, Settings, pct, say

QUEUE = "later"
BATCH = 1000
PROBES = 200
QUICK_PROBES = 50
SPACING_S = 0.05
#: The probes' first due time, after their submit: room for the submit itself.
LEAD_S = 2.0
SYSTEM = "lakeshore sqlite, delayed jobs"


def scheduled_rows(s: Settings) -> int:
    return 2000 if s.quick else int(os.environ.get("BENCH_LATENESS_ROWS", "100000"))


def seed(plane: Dispatch, rows: int) -> None:
    """`rows` jobs due an hour from now: what a plane holds while the probes fall due."""
    at = time.time() + 3600.0
    payload = codec.encode(0)
    for done in range(0, rows, BATCH):
        n = min(BATCH, rows - done)
        plane.submit(QUEUE, [SubmitRequest(payload=payload, at=at)] * n)


def probe(plane: Dispatch, probes: int) -> list[float]:
    """Lateness of each probe, in ms (claim returned minus due)."""
    start = time.time() + LEAD_S
    due = [start + i * SPACING_S for i in range(probes)]
    ids = plane.submit(
        QUEUE, [SubmitRequest(payload=codec.encode(i), at=t) for i, t in enumerate(due)]
    )
    due_of = dict(zip(ids, due, strict=True))
    late: list[float] = []
    deadline = due[-1] + 30.0
    while len(late) < probes and time.time() < deadline:
        got = plane.claim_many([QUEUE], worker="bench-late", limit=1, wait_s=5.0)
        now = time.time()
        for job in got:
            late.append((now - due_of[job.id]) * 1000)
            plane.ack_many([Ack(job.id, job.lease, None)])
    if len(late) < probes:
        raise RuntimeError(f"only {len(late)} of {probes} delayed jobs were claimed in time")
    return late


def timer_floor(probes: int) -> list[float]:
    """How late a bare timed wait wakes here, in ms: the floor under any delay."""
    event = threading.Event()
    out = []
    for _ in range(probes):
        target = time.time() + SPACING_S
        event.wait(SPACING_S)
        out.append((time.time() - target) * 1000)
    return out


def measure(s: Settings) -> list[Measurement]:
    rows = scheduled_rows(s)
    probes = QUICK_PROBES if s.quick else PROBES
    with tempfile.TemporaryDirectory(prefix="bench-lateness-") as tmp:
        plane = Dispatch(str(Path(tmp) / "lakeshore.db"))
        try:
            plane.create_queue(QUEUE)
            t0 = time.perf_counter()
            seed(plane, rows)
            say(f"[lateness] {rows:,} scheduled in {time.perf_counter() - t0:.1f} s")
            late = [probe(plane, probes) for _ in range(s.reps)]
        finally:
            plane.close()
    floor = [timer_floor(probes) for _ in range(s.reps)]
    note = f"{rows:,} other jobs scheduled; one worker waiting in its claim"
    out = []
    for metric, q in (("p50", 50), ("p99", 99)):
        out.append(
            Measurement(
                "lateness",
                f"lateness {metric}",
                SYSTEM,
                [pct(r, q) for r in late],
                "ms",
                "synchronous=FULL",
                note + ("; target p99 < 50 ms" if metric == "p99" else ""),
                probes,
            )
        )
        out.append(
            Measurement(
                "lateness",
                f"lateness {metric}",
                "floor: a timed Event.wait",
                [pct(r, q) for r in floor],
                "ms",
                note="threading.Event().wait(50 ms) overshoot",
                n=probes,
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--scheduled", type=int, default=None, help="jobs scheduled (100,000)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.scheduled is not None:
        os.environ["BENCH_LATENESS_ROWS"] = str(args.scheduled)
    for m in measure(Settings.make(args.quick)):
        print(f"{m.system:32} {m.metric:14} {m.median:8.2f} ms  {m.note}")


if __name__ == "__main__":
    main()
