"""What a `lakeshore-daemon` costs idle, and how fast it drains no-op jobs on the embedded plane.

    .venv/bin/python bench/daemon_bench.py [--idle-s 30] [--jobs 500] [--concurrency 2]

Idle: a daemon (its slot children included) is left alone for --idle-s seconds; CPU is the
process tree's CPU time over that window as a percentage of one core, RSS is summed over the tree.
Throughput: --jobs no-op thunks are submitted in one batch to a warm daemon with --concurrency
slots; the clock runs from the submit until the last job has succeeded. A measurement, never a test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane import Dispatch


def start_daemon(home: Path, name: str, queue: str, concurrency: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESHORE_")}
    env["LAKESHORE_HOME"] = str(home)
    log = open(home / f"{name}.log", "wb")  # noqa: SIM115 - lives as long as the daemon
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dreamlake.lakeshore.daemon",
            "--name",
            name,
            "--queue",
            queue,
            "--concurrency",
            str(concurrency),
            "--log-json",
            "--log-level",
            "warning",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def wait_ready(plane: Dispatch, name: str, concurrency: int, timeout: float = 60.0) -> None:
    """Ready once its heartbeat shows every slot with a live child."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            slots = plane.worker(name).load.get("slots") or []
        except dls.DispatchError:
            slots = []
        if len(slots) == concurrency and all(s.get("pid") for s in slots):
            return
        time.sleep(0.1)
    raise TimeoutError(f"daemon {name} not ready after {timeout}s")


def tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def cpu_seconds(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def measure_idle(home: Path, seconds: float) -> dict[str, float]:
    with Dispatch(home / "lakeshore.db") as plane:
        proc = start_daemon(home, "idle", "idle", 1)
        try:
            wait_ready(plane, "idle", 1)
            procs = tree(proc.pid)
            before, t0 = cpu_seconds(procs), time.monotonic()
            time.sleep(seconds)  # the thing measured: a daemon with nothing to do
            used, elapsed = cpu_seconds(procs) - before, time.monotonic() - t0
            daemon_rss = procs[0].memory_info().rss
            tree_rss = sum(p.memory_info().rss for p in procs)
        finally:
            proc.terminate()
            proc.wait(30)
    return {
        "idle_seconds": round(elapsed, 1),
        "idle_cpu_percent_of_one_core": round(100 * used / elapsed, 3),
        "idle_cpu_seconds": round(used, 3),
        "daemon_rss_mb": round(daemon_rss / 2**20, 1),
        "tree_rss_mb_with_1_child": round(tree_rss / 2**20, 1),
        "processes": len(procs),
    }


def measure_throughput(home: Path, jobs: int, concurrency: int) -> dict[str, float]:
    with Dispatch(home / "lakeshore.db") as plane:
        q = dls.SyncQueue("bench", dispatch=plane)
        proc = start_daemon(home, "busy", "bench", concurrency)
        try:
            wait_ready(plane, "busy", concurrency)
            thunks = [dls.thunk(int) for _ in range(jobs)]  # int() -> 0: a no-op by reference
            t0 = time.perf_counter()
            ids = q.submit_many(thunks)
            submitted = time.perf_counter() - t0
            for inv in ids:
                q.result(inv, timeout=300)
            elapsed = time.perf_counter() - t0
            assert q.count("succeeded") == jobs
        finally:
            proc.terminate()
            proc.wait(30)
    return {
        "jobs": jobs,
        "concurrency": concurrency,
        "submit_seconds": round(submitted, 3),
        "total_seconds": round(elapsed, 3),
        "jobs_per_second": round(jobs / elapsed, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle-s", type=float, default=30.0)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lakeshore-bench-") as tmp:
        idle = measure_idle(Path(tmp) / "idle", args.idle_s) if args.idle_s > 0 else {}
        busy = measure_throughput(Path(tmp) / "busy", args.jobs, args.concurrency)
    print(json.dumps({"idle": idle, "throughput": busy, "cpus": os.cpu_count()}, indent=2))


if __name__ == "__main__":
    main()
