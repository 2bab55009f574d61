"""The controller's time from a backlog to a claiming daemon: submit -> first claim (issue 37).

A fully_elastic queue at zero on the named provider gets one job; the controller (in this
process, ticking every --interval-s) launches a daemon; the figure is the job's `started_at`
(its claim, stamped by the plane) minus its `created_at`. Each run has a fresh SQLite plane and
a fresh fleet. The slurm provider needs a running Slurm (`sudo bash .ci/slurm-up`); its daemons
run this virtualenv's Python, so the nodes must share this filesystem (true on one box).
Run: .venv/bin/python -m bench.first_claim [--providers local,slurm] [--runs 5] [--interval-s 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.controller.loop import Controller, Settings
from dreamlake.lakeshore.plane import Dispatch


def config(kind: str, home: Path) -> dict[str, Any]:
    if kind == "local":
        return {"state_dir": str(home / "local")}
    return {
        "state_dir": str(home / "slurm"),
        "command": [sys.executable, "-m", "dreamlake.lakeshore.daemon"],
        "cpus_per_task": 1,
        "mem": 256,
        "time": 10,
    }


def one_run(kind: str, interval_s: float) -> float:
    with tempfile.TemporaryDirectory() as tmp, Dispatch(Path(tmp) / "lakeshore.db") as plane:
        home = Path(tmp)
        plane.add_provider("p", kind, config(kind, home))
        plane.create_queue("q", elasticity={"kind": "fully_elastic", "max": 1, "provider": "p"})
        settings = Settings(
            interval_s=interval_s, plane_url=str(home / "lakeshore.db"), scale_down_window_s=0
        )
        controller = Controller(plane.store, settings)
        stop = threading.Event()
        loop = threading.Thread(target=controller.run, args=(stop,), daemon=True)
        loop.start()
        try:
            q = dls.SyncQueue("q", dispatch=plane)
            inv = q.submit(dls.thunk(abs, -1))
            assert q.result(inv, timeout=120) == 1
            record = plane.invocation(inv)
            assert record.started_at is not None
            return record.started_at - record.created_at
        finally:
            stop.set()
            loop.join()
            for row in plane.workers():  # leave nothing running: drain, then end the fleet
                plane.set_worker_state(row.id, "draining")
            ended = time.monotonic() + 60
            while plane.workers() and time.monotonic() < ended:
                time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--providers", default="local,slurm")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--interval-s", type=float, default=1.0)
    args = parser.parse_args()
    print(f"controller --interval-s {args.interval_s:g}; submit -> first claim, {args.runs} runs")
    for kind in args.providers.split(","):
        times = [one_run(kind, args.interval_s) for _ in range(args.runs)]
        print(
            f"{kind:>6}: median {statistics.median(times):.2f} s, "
            f"min {min(times):.2f} s, max {max(times):.2f} s  "
            f"({', '.join(f'{t:.2f}' for t in times)})"
        )


if __name__ == "__main__":
    main()
