"""Where a `q.call` over HTTP spends its CPU: per process (server, producer, daemon, slot child),
user and system, and its context switches, per call, beside the call's p50 and p99 (issue 16's
profile); on Postgres, PostgreSQL's own processes too; the server's CPU per thread.

    .venv/bin/python -m bench.cpu_per_call [--calls 2000] [--normal] [--plane embedded-xproc]

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
from .lakeshore_runs import _plane, _plane_for, daemons


def _servers(url: str | None) -> dict[str, psutil.Process]:
    """The control plane's process, found by the port it listens on (none when embedded)."""
    if url is None:
        return {}
    port = int(url.rsplit(":", 1)[1])
    for conn in psutil.net_connections("tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port and conn.pid:
            return {"server": psutil.Process(conn.pid)}
    return {}


def _postgres() -> dict[str, psutil.Process]:
    """PostgreSQL's processes on this box (backends, WAL writer, checkpointer): on a shared
    box their CPU is on the call's path as much as any of Lakeshore's."""
    found = {}
    for p in psutil.process_iter(["name"]):
        if p.info["name"] in ("postgres", "postmaster"):
            found[f"postgres {p.pid}"] = p
    return found


def _switches(proc: psutil.Process) -> int:
    """Context switches so far of all the process's threads, voluntary (a wait) and not
    (preempted): on a VM each costs the scheduler's and the hypervisor's time, charged to the
    process as system CPU. (psutil counts the main thread's only.)"""
    total = 0
    try:
        for task in Path(f"/proc/{proc.pid}/task").iterdir():
            for line in (task / "status").read_text().splitlines():
                if "ctxt_switches:" in line:
                    total += int(line.split(":")[1])
    except OSError:  # not Linux, or the process is gone: the main thread's, from psutil
        counts = proc.num_ctx_switches()
        return int(counts.voluntary + counts.involuntary)
    return total


def _threads(proc: psutil.Process) -> dict[int, float]:
    """CPU seconds so far per thread of `proc`."""
    return {t.id: t.user_time + t.system_time for t in proc.threads()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--normal", action="store_true", help="synchronous=NORMAL")
    parser.add_argument(
        "--plane", default="http-sqlite", choices=["http-sqlite", "http-postgres", "embedded-xproc"]
    )
    parser.add_argument("--hold", type=float, default=0.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lakeshore-cpu-") as scratch:
        home = Path(scratch)
        with (
            _plane_for(args.plane, home, args.normal) as (url, token, store, _, _),
            daemons(1, "rpc", home=home, url=url, token=token, store=store, normal=args.normal) as (
                daemon_pid,
            ),
            _plane(url, token, store, args.normal) as plane,
        ):
            q = dls.SyncQueue("rpc", dispatch=plane)
            wait_for(lambda: q.call(0, timeout=2) == 0, 60, "daemon")
            for _ in range(200):
                q.call(0)
            daemon = psutil.Process(daemon_pid)
            procs = {"producer": psutil.Process(), "daemon": daemon}
            procs.update(_servers(url))
            procs.update({f"child {c.pid}": c for c in daemon.children(recursive=True)})
            if args.plane == "http-postgres":
                procs.update(_postgres())
            server = procs.get("server")
            threads_before = _threads(server) if server else {}
            before = {name: p.cpu_times() for name, p in procs.items()}
            switches_before = {name: _switches(p) for name, p in procs.items()}
            took = []
            for _ in range(args.calls):
                start = time.perf_counter()
                q.call(0)
                took.append((time.perf_counter() - start) * 1000)
            after = {name: p.cpu_times() for name, p in procs.items()}
            switches_after = {name: _switches(p) for name, p in procs.items()}
            threads_after = _threads(server) if server else {}
            print(
                f"q.call p50 {statistics.median(took):.3f} ms, p99 {pct(took, 99):.3f} ms "
                f"({args.calls} calls, {'NORMAL' if args.normal else 'FULL'})"
            )
            pg_total = 0.0
            for name in procs:
                user = (after[name].user - before[name].user) / args.calls * 1000
                system = (after[name].system - before[name].system) / args.calls * 1000
                if name.startswith("postgres"):
                    pg_total += user + system
                    if user + system < 0.005:
                        continue  # an idle backend: summed below, not listed
                switches = (switches_after[name] - switches_before[name]) / args.calls
                print(
                    f"  {name:14s} {user:.3f} ms user + {system:.3f} ms system per call, "
                    f"{switches:.1f} context switches"
                )
            if pg_total:
                print(f"  {'postgres, all':14s} {pg_total:.3f} ms per call")
            if server:
                busy = sorted(
                    (threads_after[t] - threads_before.get(t, 0.0), t) for t in threads_after
                )
                per_thread = ", ".join(
                    f"{t} {s / args.calls * 1000:.3f}" for s, t in reversed(busy) if s > 0
                )
                print(f"  server threads (id ms/call): {per_thread}")
            if args.hold:
                print(f"pids: {', '.join(f'{n} {p.pid}' for n, p in procs.items())}", flush=True)
                time.sleep(args.hold)


if __name__ == "__main__":
    main()
