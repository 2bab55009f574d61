"""Lakeshore's side of every comparison: RPC round trips and fan-out drains, per plane and mode.

Planes: `lakeshore server` over HTTP on SQLite and on Postgres (a scratch schema), the embedded
plane in one process (a `run_worker` thread) and across processes (a `lakeshore-daemon` on the
same SQLite file). Workers are real `lakeshore-daemon`s (one slot each) running the no-op
handler `bench.tasks:noop`, except the in-process case. Durability: synchronous=FULL (the
default) runs the real commands; synchronous=NORMAL runs `bench.serve`, the same code with the
store opened durable=False. Postgres runs at the server's defaults (synchronous_commit=on).
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane import Dispatch

from .common import (
    POSTGRES_URL,
    Measurement,
    Settings,
    clean_env,
    free_port,
    idle_cost,
    log_dir,
    process,
    rpc_loop,
    rpc_measurements,
    wait_for,
)

HANDLER = "bench.tasks:noop"
LAUNCH = "from dreamlake.lakeshore.cli.main import main; main()"  # `lakeshore`, this interpreter
FULL, NORMAL = "synchronous=FULL", "synchronous=NORMAL"
PG_DURABILITY = "Postgres synchronous_commit=on"


def durability(normal: bool) -> str:
    return NORMAL if normal else FULL


@contextlib.contextmanager
def server(home: Path, store: str, normal: bool = False) -> Iterator[tuple[str, str, int]]:
    """A control plane on a free loopback port: (url, admin token, pid)."""
    port = free_port()
    env = clean_env(LAKESHORE_HOME=str(home))
    home.mkdir(parents=True, exist_ok=True)
    if normal:
        argv = [sys.executable, "-m", "bench.serve", "server", "--store", store, "--normal"]
    else:
        argv = [sys.executable, "-c", LAUNCH, "server", "--store", store]
    argv += ["--port", str(port)]
    log = log_dir() / f"server-{port}.log"
    with process(argv, log, env) as proc:
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: httpx.get(f"{url}/v1/hello").status_code == 200, 60, "server", log)
        # A replica joining a store that already has an admin token writes no token file.
        token_file = home / "token"
        token = token_file.read_text().strip() if token_file.exists() else ""
        yield url, token, proc.pid


@contextlib.contextmanager
def daemons(
    n: int,
    queue: str,
    *,
    home: Path,
    url: str | None = None,
    token: str | None = None,
    store: str | None = None,
    normal: bool = False,
    prefetch: int = 0,
    env: dict[str, str] | None = None,
) -> Iterator[list[int]]:
    """n daemons with one slot each, on a server (url) or an embedded SQLite file (store)."""
    env = clean_env(LAKESHORE_HOME=str(home), **(env or {}))
    with contextlib.ExitStack() as stack:
        pids = []
        for i in range(n):
            name = f"bench-{queue}-{i}"
            if normal and store:  # over HTTP the server's store sets the durability
                argv = [sys.executable, "-m", "bench.serve", "daemon", "--store", store]
                argv += ["--normal", "--queue", queue, "--name", name, "--handler", HANDLER]
                argv += ["--prefetch", str(prefetch)]
            else:
                argv = [sys.executable, "-m", "dreamlake.lakeshore.daemon", "--queue", queue]
                argv += ["--name", name, "--handler", HANDLER, "--log-level", "warning"]
                argv += ["--log-json", "--prefetch", str(prefetch)]
                if url:
                    argv += ["--url", url, "--token", token or ""]
            proc = stack.enter_context(process(argv, log_dir() / f"daemon-{name}.log", env))
            pids.append(proc.pid)
        yield pids


def _plane(url: str | None, token: str | None, store: str | None, normal: bool) -> dls.Plane:
    if url:
        return dls.HttpDispatch(url, token=token)
    assert store is not None
    return Dispatch(store, durable=not normal)


def _ready(q: dls.SyncQueue) -> None:
    wait_for(lambda: q.call(0, timeout=2) == 0, 90, "daemon")


# -- RPC ------------------------------------------------------------------------------------------


def rpc(s: Settings, plane: str, normal: bool = False) -> list[Measurement]:
    """plane: http-sqlite, http-postgres, embedded, embedded-xproc."""
    with tempfile.TemporaryDirectory(prefix="bench-ls-") as tmp:
        home = Path(tmp)
        if plane == "embedded":
            return _rpc_inprocess(s, home, normal)
        with (
            _plane_for(plane, home, normal) as (url, token, store, dur, label),
            daemons(1, "rpc", home=home, url=url, token=token, store=store, normal=normal) as pids,
        ):
            p = _plane(url, token, store, normal)
            try:
                q = dls.SyncQueue("rpc", dispatch=p)
                _ready(q)
                reps = [
                    rpc_loop(lambda i: q.call(i, timeout=10), s.calls, s.rpc_cap_s, s.warmup_calls)
                    for _ in range(s.reps)
                ]
                out = rpc_measurements(label, reps, dur, "one daemon, one slot")
                if plane in ("http-sqlite", "embedded-xproc") and not normal:
                    cpu, rss = idle_cost(pids[0], s.idle_s)
                    note = "daemon + its slot child"
                    out += [
                        Measurement("idle", "cpu", label, [cpu], "%", dur, note),
                        Measurement("idle", "rss", label, [rss], "MiB", dur, note),
                    ]
                return out
            finally:
                p.close()


@contextlib.contextmanager
def _plane_for(
    plane: str, home: Path, normal: bool
) -> Iterator[tuple[str | None, str | None, str | None, str, str]]:
    """(url, token, embedded store path, durability, system label) for a plane kind."""
    if plane == "http-sqlite":
        with server(home / "srv", str(home / "srv" / "lakeshore.db"), normal) as (url, token, _):
            yield url, token, None, durability(normal), "lakeshore http (sqlite)"
    elif plane == "http-postgres":
        from dreamlake.lakeshore.plane.postgres import scratch_schema

        with (
            scratch_schema(POSTGRES_URL, "bench_http") as scoped,
            server(home / "srv", scoped) as (url, token, _),
        ):
            yield url, token, None, PG_DURABILITY, "lakeshore http (postgres)"
    elif plane == "embedded-xproc":
        # The daemon opens $LAKESHORE_HOME/lakeshore.db; the producer opens the same file.
        yield (
            None,
            None,
            str(home / "lakeshore.db"),
            durability(normal),
            "lakeshore embedded 2-proc",
        )
    else:
        raise ValueError(plane)


def _rpc_inprocess(s: Settings, home: Path, normal: bool) -> list[Measurement]:
    with Dispatch(home / "embedded.db", durable=not normal) as plane:
        q = dls.SyncQueue("rpc", dispatch=plane)
        stop = threading.Event()
        thread = threading.Thread(
            target=dls.run_worker,
            args=(plane, ["rpc"]),
            kwargs={"stop": stop, "handler": lambda x: x},
            daemon=True,
        )
        thread.start()
        try:
            reps = [
                rpc_loop(lambda i: q.call(i, timeout=10), s.calls, s.rpc_cap_s, s.warmup_calls)
                for _ in range(s.reps)
            ]
        finally:
            stop.set()
            thread.join(timeout=5)
    return rpc_measurements(
        "lakeshore embedded 1-proc", reps, durability(normal), "run_worker thread"
    )


# -- fan-out --------------------------------------------------------------------------------------


#: Fan-out daemons claim this many ahead (`--prefetch`): a stream of no-op jobs is the case it
#: is for. One run at the default (0) shows what it buys.
FANOUT_PREFETCH = 64


def fanout(
    s: Settings, plane: str, normal: bool = False, prefetch: int = FANOUT_PREFETCH
) -> list[Measurement]:
    """n jobs submitted in batches of 1,000 (one request or transaction each), 2 daemons drain.

    On Postgres a fifth of the jobs (it drains at a few hundred a second here): same rate.
    """
    jobs = s.jobs if plane != "http-postgres" else max(200, s.jobs // 5)
    with (
        tempfile.TemporaryDirectory(prefix="bench-ls-") as tmp,
        _plane_for(plane, Path(tmp), normal) as (url, token, store, dur, label),
        daemons(
            2,
            "fan",
            home=Path(tmp),
            url=url,
            token=token,
            store=store,
            normal=normal,
            prefetch=prefetch,
        ),
    ):
        p = _plane(url, token, store, normal)
        try:
            q = dls.SyncQueue("fan", dispatch=p)
            _ready(q)
            subs, comps = [], []
            for _ in range(s.reps):
                before = q.count("succeeded")
                start = time.perf_counter()
                for lo in range(0, jobs, 1000):
                    ids = q.submit_many(list(range(lo, min(jobs, lo + 1000))))
                subs.append(jobs / (time.perf_counter() - start))
                # Wait on the last job first (a long-poll, no load), then count what is left:
                # counting succeeded rows every few ms loads the very store being measured.
                with contextlib.suppress(TimeoutError):
                    q.result(
                        ids[-1], timeout=max(0.1, start + s.fanout_cap_s - time.perf_counter())
                    )
                done = _wait_count(q, before, jobs, start + s.fanout_cap_s)
                comps.append(done / (time.perf_counter() - start))
                # A capped repetition leaves a backlog: drain it before the next one starts.
                if _wait_count(q, before, jobs, time.perf_counter() + 2 * s.fanout_cap_s) < jobs:
                    break
        finally:
            p.close()
    note = f"2 daemons x 1 slot, --prefetch {prefetch}, submit_many(1000)"
    if prefetch != FANOUT_PREFETCH:
        label += f", prefetch {prefetch}"
    return [
        Measurement("fanout", "submit", label, subs, "jobs/s", dur, note, jobs),
        Measurement("fanout", "complete", label, comps, "jobs/s", dur, note, jobs),
    ]


def _wait_count(q: dls.SyncQueue, before: int, n: int, deadline: float) -> int:
    """Jobs succeeded since `before`, once all n are, or as many as there are at the deadline."""
    while True:
        done = q.count("succeeded") - before
        if done >= n or time.perf_counter() >= deadline:
            return done
        time.sleep(0.005)
