"""A/B of `q.call` between two trees of the code, call by call: which change made it faster.

    git worktree add /tmp/base main~1
    .venv/bin/python -m bench.ab_call --base /tmp/base [--calls 3000] [--normal]
        [--plane http-sqlite|http-postgres|embedded-xproc]

On a shared box the speed of the machine drifts by a third between runs minutes apart, so two
runs of `bench.cpu_per_call` one after the other cannot tell a 5% change from the weather. Here
both sides run at once, each with its own server (or file) and daemon, and the calls alternate
between them, so a slow minute slows both. The base side's processes import the package from
`--base` (a tree of links shaped like the installed package, first on their PYTHONPATH); the
producer is this process, so its own code is this tree's on both sides: a change to the
producer is not measured here. Embedded, each side's file is made by its own code.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane.dispatch import Dispatch
from dreamlake.lakeshore.plane.postgres import scratch_schema

from .common import POSTGRES_URL, environ, pct, wait_for
from .lakeshore_runs import daemons, server

#: The installed package's folders, as pyproject.toml maps them.
SUBPACKAGES = ("server", "daemon", "controller", "providers", "cli")


def link_tree(base: Path, into: Path) -> Path:
    """A folder that imports `dreamlake.lakeshore` from the tree at `base`."""
    package = into / "dreamlake" / "lakeshore"
    package.mkdir(parents=True)
    for entry in (base / "sdk").iterdir():
        (package / entry.name).symlink_to(entry)
    for name in SUBPACKAGES:
        (package / name).symlink_to(base / name)
    return into


@contextlib.contextmanager
def side(
    plane: str, home: Path, pythonpath: str | None, normal: bool
) -> Iterator[tuple[dls.SyncQueue, psutil.Process | None]]:
    """One side: its plane and daemon up, and a queue to call (with its server's process)."""
    with contextlib.ExitStack() as stack:
        url = token = store = None
        proc = None
        # The side's processes, started inside, import the package from `pythonpath` first.
        with environ(PYTHONPATH=pythonpath) if pythonpath else contextlib.nullcontext():
            if plane.startswith("http-"):
                if plane == "http-postgres":
                    db = stack.enter_context(scratch_schema(POSTGRES_URL, "bench_ab"))
                else:
                    db = str(home / "srv" / "lakeshore.db")
                url, token, pid = stack.enter_context(server(home / "srv", db, normal))
                proc = psutil.Process(pid)
            else:
                store = str(home / "lakeshore.db")
                make = "from dreamlake.lakeshore.plane.sqlite import SqliteConnector as C; "
                make += f"C({store!r}).close()"
                subprocess.run([sys.executable, "-c", make], env=dict(os.environ), check=True)
            stack.enter_context(
                daemons(1, "rpc", home=home, url=url, token=token, store=store, normal=normal)
            )
        dispatch: dls.Plane = (
            dls.HttpDispatch(url, token=token)
            if url
            else stack.enter_context(Dispatch(store, durable=not normal))
        )
        q = dls.SyncQueue("rpc", dispatch=dispatch)
        wait_for(lambda: q.call(0, timeout=2) == 0, 60, "daemon")
        yield q, proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--base", type=Path, required=True, help="a checkout of the base tree")
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--normal", action="store_true", help="synchronous=NORMAL")
    parser.add_argument(
        "--plane", default="http-sqlite", choices=["http-sqlite", "http-postgres", "embedded-xproc"]
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lakeshore-ab-") as scratch:
        root = Path(scratch)
        links = str(link_tree(args.base.resolve(), root / "base-links"))
        with (
            side(args.plane, root / "base", links, args.normal) as (qa, sa),
            side(args.plane, root / "new", None, args.normal) as (qb, sb),
        ):
            for _ in range(300):
                qa.call(0)
                qb.call(0)
            took: dict[str, list[float]] = {"base": [], "new": []}
            cpu_before = {n: p.cpu_times() for n, p in (("base", sa), ("new", sb)) if p}
            order = (("base", qa), ("new", qb))
            for i in range(args.calls):
                # Each side goes first every other round: neither always follows the other.
                for name, q in order if i % 2 else order[::-1]:
                    start = time.perf_counter()
                    q.call(0)
                    took[name].append((time.perf_counter() - start) * 1000)
            for name, proc in (("base", sa), ("new", sb)):
                t = took[name]
                line = (
                    f"{name:4s} p50 {statistics.median(t):.3f} p90 {pct(t, 90):.3f} "
                    f"p99 {pct(t, 99):.3f} ms"
                )
                if proc is not None:
                    before, after = cpu_before[name], proc.cpu_times()
                    cpu = after.user + after.system - before.user - before.system
                    line += f", server CPU {cpu / args.calls * 1000:.3f} ms a call"
                print(line)


if __name__ == "__main__":
    main()
