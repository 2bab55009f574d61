"""6. Locality: jobs each reading a Ref held on host A, one worker on host A and one on host B.

Two hosts on one box: two `lakeshore-daemon`s with their own host ids (`LAKESHORE_HOST_ID` A
and B) and their own host tiers (`LAKESHORE_OBJECTS`, each an arena in tmpfs), sharing one
file:// storage tier, so a job that runs on B fetches its object (from storage, hash-checked,
into B's tier) as a worker on another box would. One daemon alone would not do: two processes
sharing one arena are one host.

Each repetition puts `jobs` fresh objects of `mib` MiB as host A (durable: in A's tier and
fsynced to storage; not timed), then submits one job per object in one request, each reading
its object and summing it, and waits for every result. Measured with locality on (the queue's
default `locality_wait_s`) and off (`locality_wait_s: 0`): the share of jobs that ran on A,
the time from the submit to the last result, and each host's p50 job run time (what a fetch
adds). The issue's figure is 200 jobs of 64 MiB; the default here, 40 of 16 MiB, keeps a run
short on a small box (`--jobs 200 --mib 64` for the full one, with ~26 GiB of tmpfs and disk).

    .venv/bin/python -m bench.locality [--jobs 40] [--mib 16] [--reps 3]
    .venv/bin/python -m bench --only locality
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane.locality import DEFAULT_WAIT_S

from .common import Measurement, Settings, clean_env, environ, log_dir, process, say, wait_for
from .lakeshore_runs import FULL, server

JOBS, MIB = 40, 16
HOSTS = ("host-a", "host-b")
#: Above the default wait: a run whose jobs all ran on A in less time says nothing of B.
RESULT_TIMEOUT_S = 300.0


def read_sum(ref: Any) -> dict[str, Any]:
    """The job: read the object (a view on its holder's host; a fetch elsewhere) and sum it."""
    from dreamlake.lakeshore import objects

    return {"host": objects.host_id(), "sum": float(dls.get(ref).sum(dtype="float64"))}


@dataclass
class Run:
    on_a: float  # share of the jobs that ran on host A, in %
    total_s: float  # submit to the last result
    p50_ms: dict[str, float]  # per host: p50 of started -> finished


@contextlib.contextmanager
def _tiers() -> Iterator[dict[str, Path]]:
    """A host tier (arena folder) per host, in tmpfs where there is one; removed after."""
    from dreamlake.lakeshore.objects.arena import close_arena

    shm = Path("/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir())
    folders = {h: Path(tempfile.mkdtemp(prefix=f"bench-locality-{h}-", dir=shm)) for h in HOSTS}
    try:
        yield folders
    finally:
        for folder in folders.values():
            close_arena(folder)
            shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def _as_host(host: str, tier: Path, cap: int) -> Iterator[None]:
    """This process puts its objects as `host` would: its host id and its host tier."""
    with environ(
        LAKESHORE_HOST_ID=host, LAKESHORE_OBJECTS=str(tier), LAKESHORE_OBJECTS_CAP=str(cap)
    ):
        yield


@contextlib.contextmanager
def _two_hosts(home: Path, cap: int) -> Iterator[tuple[dls.HttpDispatch, str, Path]]:
    """A server, a daemon on each host (one slot each), this process as host A."""
    storage_dir = home / "storage"
    storage = f"file://{storage_dir}"
    with (
        _tiers() as tiers,
        server(home / "srv", str(home / "srv" / "lakeshore.db")) as (url, token, _),
        contextlib.ExitStack() as stack,
    ):
        for host in HOSTS:
            env = clean_env(
                LAKESHORE_HOME=str(home / host),
                LAKESHORE_HOST_ID=host,
                LAKESHORE_OBJECTS=str(tiers[host]),
                LAKESHORE_OBJECTS_CAP=str(cap),
                LAKESHORE_STORAGE=storage,
            )
            argv = [sys.executable, "-m", "dreamlake.lakeshore.daemon", "--name", f"on-{host}"]
            argv += ["-q", "loc-on", "-q", "loc-off", "--url", url, "--token", token]
            argv += ["--log-level", "warning", "--log-json"]
            stack.enter_context(process(argv, log_dir() / f"daemon-locality-{host}.log", env))
        stack.enter_context(_as_host(HOSTS[0], tiers[HOSTS[0]], cap))
        plane = stack.enter_context(dls.HttpDispatch(url, token=token, timeout_s=120))
        plane.create_queue("loc-on")  # the default wait
        plane.create_queue("loc-off", admission={"locality_wait_s": 0})
        wait_for(lambda: len(plane.workers()) == len(HOSTS), 90, "daemons")
        yield plane, storage, storage_dir


def _run(plane: dls.HttpDispatch, queue: str, storage: str, jobs: int, size: int) -> Run:
    refs = [dls.put(np.full(size // 4, i, dtype=np.float32), storage=storage) for i in range(jobs)]
    q = dls.SyncQueue(queue, dispatch=plane)
    start = time.perf_counter()
    ids = q.submit_many([dls.thunk(read_sum, ref) for ref in refs])
    done = [q.result(i, timeout=RESULT_TIMEOUT_S) for i in ids]
    total = time.perf_counter() - start
    for i, got in enumerate(done):
        assert got["sum"] == float(i) * (size // 4), "a job read the wrong bytes"
    rows = [plane.invocation(i) for i in ids]
    per_host: dict[str, list[float]] = {h: [] for h in HOSTS}
    for got, row in zip(done, rows, strict=True):
        assert row.started_at is not None and row.finished_at is not None
        per_host[got["host"]].append((row.finished_at - row.started_at) * 1000)
    return Run(
        on_a=100.0 * len(per_host[HOSTS[0]]) / jobs,
        total_s=total,
        p50_ms={h: statistics.median(v) if v else float("nan") for h, v in per_host.items()},
    )


def _clear(storage_dir: Path) -> None:
    """Drop the run's durable copies: the next run puts fresh objects (B must not find them
    cached in its tier), and disk is not spent on objects nobody reads."""
    shutil.rmtree(storage_dir / "_objects", ignore_errors=True)


MODES = {
    "loc-on": f"locality on (wait {DEFAULT_WAIT_S:g} s, the default)",
    "loc-off": "locality off (wait 0)",
}


def measure(s: Settings, *, jobs: int = JOBS, mib: int = MIB) -> list[Measurement]:
    size = mib << 20
    cap = jobs * size + (64 << 20)
    runs: dict[str, list[Run]] = {m: [] for m in MODES}
    with (
        tempfile.TemporaryDirectory(prefix="bench-locality-") as tmp,
        _two_hosts(Path(tmp), cap) as (plane, storage, storage_dir),
    ):
        _run(plane, "loc-off", storage, 2, size)  # warm-up: children started, arenas mapped
        _clear(storage_dir)
        for _ in range(s.reps):
            for queue in MODES:  # interleaved, so drift on a shared box hits both alike
                runs[queue].append(_run(plane, queue, storage, jobs, size))
                _clear(storage_dir)
    return _figures(runs, jobs, mib)


def _figures(runs: dict[str, list[Run]], jobs: int, mib: int) -> list[Measurement]:
    note = f"{jobs} jobs x {mib} MiB Ref on host A; daemons on A and B, 1 slot each"
    out: list[Measurement] = []
    for queue, name in MODES.items():
        system = f"lakeshore http, {name}"
        done = runs[queue]
        p50 = {h: [r.p50_ms[h] for r in done] for h in HOSTS}
        extra = {f"job p50 ms on {h}": p50[h] for h in HOSTS}
        shares = [r.on_a for r in done]
        totals = [r.total_s for r in done]
        out.append(_m("jobs run on host A", system, shares, "% on A", note, jobs, extra))
        out.append(_m("total time, submit to last result", system, totals, "s", note, jobs, extra))
        for host in HOSTS:
            values = [v for v in p50[host] if v == v]  # nan: no job ran there
            if values:
                why = "on host-b a job fetches its object first" if host != HOSTS[0] else note
                out.append(_m(f"job run p50 on {host}", system, values, "ms", why, jobs, {}))
    return out


def _m(
    metric: str,
    system: str,
    values: list[float],
    unit: str,
    note: str,
    jobs: int,
    extra: dict[str, Any],
) -> Measurement:
    return Measurement("locality", metric, system, values, unit, FULL, note, jobs, extra)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=JOBS)
    parser.add_argument("--mib", type=int, default=MIB)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    settings = Settings.make(False)
    settings.reps = args.reps
    for m in measure(settings, jobs=args.jobs, mib=args.mib):
        spread = f" ({m.lo:.3g}-{m.hi:.3g})" if len(m.values) > 1 else ""
        say(f"{m.system:45} {m.metric:36} {m.median:8.3g}{spread} {m.unit}")


if __name__ == "__main__":
    main()
