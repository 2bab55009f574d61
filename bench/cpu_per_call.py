"""Where a `q.call` over HTTP spends its CPU: per process (server, producer, daemon, slot child),
user and system, per call, beside the call's p50 and p99 (issue 16's profile).

    .venv/bin/python -m bench.cpu_per_call [--calls 2000] [--normal]

On a box where every process shares two cores, the call's latency is close to the sum of the
CPU on its path, so this says which process to make cheaper. For the inside of one process,
attach `py-spy record -p PID --native -f raw` while it runs (`--hold S` keeps the processes up
S seconds after the calls and prints their pids).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import psutil

import dreamlake.lakeshore as dls

from .common import pct, wait_for
from .lakeshore_runs import daemons, server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--normal", action="store_true", help="synchronous=NORMAL")
    parser.add_argument("--hold", type=float, default=0.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lakeshore-cpu-") as scratch:
        home = Path(scratch)
        store = str(home / "plane.db")
        with (
            server(home / "srv", store, normal=args.normal) as (url, token, server_pid),
            daemons(1, "rpc", home=home / "daemon", url=url, token=token) as (daemon_pid,),
            dls.HttpDispatch(url, token=token) as plane,
        ):
            q = dls.SyncQueue("rpc", dispatch=plane)
            wait_for(lambda: q.call(0, timeout=2) == 0, 60, "daemon")
            for _ in range(200):
                q.call(0)
            daemon = psutil.Process(daemon_pid)
            procs = {"server": psutil.Process(server_pid), "producer": psutil.Process()}
            procs["daemon"] = daemon
            procs.update({f"child {c.pid}": c for c in daemon.children(recursive=True)})
            before = {name: p.cpu_times() for name, p in procs.items()}
            took = []
            for _ in range(args.calls):
                start = time.perf_counter()
                q.call(0)
                took.append((time.perf_counter() - start) * 1000)
            after = {name: p.cpu_times() for name, p in procs.items()}
            print(
                f"q.call p50 {statistics.median(took):.3f} ms, p99 {pct(took, 99):.3f} ms "
                f"({args.calls} calls, {'NORMAL' if args.normal else 'FULL'})"
            )
            for name in procs:
                user = (after[name].user - before[name].user) / args.calls * 1000
                system = (after[name].system - before[name].system) / args.calls * 1000
                print(f"  {name:14s} {user:.3f} ms user + {system:.3f} ms system per call")
            if args.hold:
                print(f"pids: server {server_pid}, daemon {daemon_pid}", flush=True)
                time.sleep(args.hold)


if __name__ == "__main__":
    main()
