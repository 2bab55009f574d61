"""Soak: the fault suite's random mix, round after round, for as long as asked. CI does not run it.

    .venv/bin/python -m bench.soak --minutes 30 --backend both
    .venv/bin/python -m bench.soak --rounds 3 --round-s 60 --seed 1234 --backend postgres

Each round starts a fresh server (SQLite, or a scratch Postgres schema), two daemons and logged
worker loops, plays a seeded schedule of faults (daemons killed -9 and SIGSTOPped past their
lease, the server killed -9 and restarted, answers lost, workers stalled past their leases),
drains, and runs the history checker (tests/faults/history.py). It prints one line per round and
a total, and exits 1 if any round found an anomaly; the seed on each line replays that round.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT / "tests" / "faults", ROOT):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from mixed import MixedReport, run_mixed  # noqa: E402


@contextlib.contextmanager
def store_for(backend: str) -> Iterator[str | None]:
    if backend == "sqlite":
        yield None
        return
    from dreamlake.lakeshore.plane.postgres import scratch_schema
    from tests.support.postgres import postgres_url

    with scratch_schema(postgres_url(), "lakeshore_soak") as url:
        yield url


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--minutes", type=float, default=10.0, help="stop starting rounds after")
    parser.add_argument("--rounds", type=int, default=0, help="at most this many (0: no cap)")
    parser.add_argument("--round-s", type=float, default=60.0, help="fault schedule per round")
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--seed", type=int, default=None, help="first round's seed")
    parser.add_argument("--daemon-jobs", type=int, default=200)
    parser.add_argument("--loop-jobs", type=int, default=1000)
    args = parser.parse_args(argv)

    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 30)
    deadline = time.monotonic() + args.minutes * 60
    reports: list[tuple[str, MixedReport]] = []
    n = 0
    while time.monotonic() < deadline and (not args.rounds or n < args.rounds):
        backend = backends[n % len(backends)]
        with (
            tempfile.TemporaryDirectory(prefix="lakeshore-soak-") as tmp,
            store_for(backend) as store,
        ):
            started = time.monotonic()
            report = run_mixed(
                Path(tmp),
                seed + n,
                seconds=args.round_s,
                store=store,
                daemon_jobs=args.daemon_jobs,
                loop_jobs=args.loop_jobs,
            )
        reports.append((backend, report))
        print(
            f"round {n} {backend} seed={report.seed} took={time.monotonic() - started:.0f}s "
            f"faults={len(report.faults)} daemon_jobs={report.daemon_jobs} "
            f"loop_jobs={report.loop_jobs} reattempts="
            f"{report.loop_stats.get('reattempts', 0) + report.daemon_stats.get('reattempts', 0)} "
            f"refused={report.loop_stats.get('settles_refused', 0)} "
            f"anomalies={len(report.anomalies)}",
            flush=True,
        )
        for line in report.anomalies:
            print(f"  {line}", flush=True)
        n += 1
    anomalies = sum(len(r.anomalies) for _, r in reports)
    jobs = sum(r.daemon_jobs + r.loop_jobs for _, r in reports)
    faults = sum(len(r.faults) for _, r in reports)
    print(f"soak: rounds={len(reports)} jobs={jobs} faults={faults} anomalies={anomalies}")
    return 1 if anomalies else 0


if __name__ == "__main__":
    sys.exit(main())
