"""Issue 16's concurrent calls: 16 producers each calling in a loop, 2 worker processes serving.

Every system gets the same load: 16 producer *processes* (a Python producer's own CPU would be
the bottleneck as threads), each with its own client, each calling a no-op and waiting for its
result in a loop. All of them start together; the first `warm` seconds are not counted, then
calls for `run` seconds. Per repetition: calls/s (calls finished in the window, all producers
together) and p50/p99 of every call started in it.

- Lakeshore: `lakeshore server` over HTTP on SQLite (synchronous=FULL) and on Postgres, 2
  `lakeshore-daemon`s of one slot each running `bench.tasks:noop`; each producer its own
  `HttpDispatch`, `q.call(i)`.
- Celery on Redis (broker and results): one prefork worker with `-c 2` (2 worker processes, as
  the fan-out suite runs it); each producer `noop.delay(i).get()`.
- Ray: a local cluster with num_cpus=2 (2 task workers). 16 driver processes would each be a
  job of their own with its own worker processes, so the producers are 16 actors
  (num_cpus=0, a process each) of one driver, each doing `ray.get(noop.remote(i))`.

On a 2-core box 16 producers plus the system's own processes are heavily oversubscribed; that is
the same for every system, and the figure is what each does with the same two cores.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing as mp
import os
import queue as queue_mod
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import REDIS_URL, Measurement, Settings, environ, pct, say

PRODUCERS = 16
WORKERS = 2
CALL_TIMEOUT_S = 60.0
#: How long producers may take to start and connect (16 interpreters on 2 cores).
START_TIMEOUT_S = 180.0

Call = Callable[[int], object]


def _window(s: Settings) -> tuple[float, float]:
    """(warm-up seconds, measured seconds) of one repetition."""
    return (1.0, 3.0) if s.quick else (2.0, 8.0)


def timed_calls(call: Call, warm_s: float, run_s: float) -> dict[str, Any]:
    """Call in a loop for warm_s + run_s seconds; latencies (ms) of the calls that started after
    the warm-up, and how many of them finished inside the measured window."""
    t0 = time.monotonic()
    counted_from, end = t0 + warm_s, t0 + warm_s + run_s
    lat: list[float] = []
    finished = errors = i = 0
    while True:
        start = time.monotonic()
        if start >= end:
            break
        try:
            call(i)
        except Exception:  # a call that fails or times out is counted, never a latency
            errors += 1
            continue
        finally:
            i += 1
        done = time.monotonic()
        if start >= counted_from:
            lat.append((done - start) * 1000)
            if done <= end:
                finished += 1
    return {"lat": lat, "finished": finished, "errors": errors}


# -- producer processes ---------------------------------------------------------------------------


def _caller(kind: str, cfg: dict[str, Any]) -> tuple[Call, Callable[[], None]]:
    """(call, close) of one producer's own client."""
    if kind == "lakeshore":
        import dreamlake.lakeshore as dls

        plane = dls.HttpDispatch(cfg["url"], token=cfg["token"])
        q = dls.SyncQueue(cfg["queue"], dispatch=plane)
        return (lambda i: q.call(i, timeout=CALL_TIMEOUT_S)), plane.close
    if kind == "celery":
        from .peers import celery_tasks  # reads BENCH_* from the environment it inherited

        # Celery 5.5's Redis result backend deadlocks a producer now and then: the cyclic GC
        # finalizes a spent AsyncResult while the backend's pub/sub connection is mid-command,
        # and its __del__ re-enters that connection's lock (celery/celery#10477, fixed
        # upstream by #10497). No cycle collection in this process keeps the finalizer out of
        # those windows; the producer lives for one run.
        gc.disable()

        noop = celery_tasks.noop
        return (lambda i: noop.delay(i).get(timeout=CALL_TIMEOUT_S)), lambda: None
    raise ValueError(kind)


def _producer(
    kind: str,
    cfg: dict[str, Any],
    reps: int,
    warm_s: float,
    run_s: float,
    barrier: Any,
    out: Any,
) -> None:
    """One producer process: connect, then per repetition wait for all the others and call."""
    try:
        call, close = _caller(kind, cfg)
        try:
            call(0)  # connected, and the path is warm
            for rep in range(reps):
                barrier.wait(timeout=START_TIMEOUT_S)
                out.put((rep, timed_calls(call, warm_s, run_s)))
        finally:
            close()
    except Exception as exc:
        barrier.abort()
        out.put((-1, {"error": f"{type(exc).__name__}: {exc}"}))
        raise


def run_producers(
    kind: str, cfg: dict[str, Any], s: Settings, env: dict[str, str] | None = None
) -> list[list[dict[str, Any]]]:
    """PRODUCERS spawned processes; per repetition, each producer's `timed_calls` result."""
    warm_s, run_s = _window(s)
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(PRODUCERS)
    out = ctx.Queue()
    per_rep: list[list[dict[str, Any]]] = [[] for _ in range(s.reps)]
    with environ(**(env or {})):  # spawned children take this process's environment
        procs = [
            ctx.Process(
                target=_producer,
                args=(kind, cfg, s.reps, warm_s, run_s, barrier, out),
                name=f"producer-{n}",
            )
            for n in range(PRODUCERS)
        ]
        for p in procs:
            p.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT_S + s.reps * (warm_s + run_s + 2 * 60)
        got = 0
        while got < PRODUCERS * s.reps:
            if time.monotonic() > deadline:
                raise TimeoutError(f"producers gave {got} of {PRODUCERS * s.reps} results")
            try:
                rep, result = out.get(timeout=1.0)
            except queue_mod.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(f"{dead[0].name} exited {dead[0].exitcode}") from None
                continue
            if rep < 0:
                raise RuntimeError(f"a producer failed: {_first_cause(result, out)}")
            per_rep[rep].append(result)
            got += 1
        for p in procs:
            p.join(30)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
    return per_rep


def _first_cause(first: dict[str, Any], out: Any) -> str:
    """The error that broke the run: the others' BrokenBarrierError only follows from it (and
    each process's queue feeder may deliver it first)."""
    errors = [first["error"]]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with contextlib.suppress(queue_mod.Empty):
            rep, result = out.get(timeout=0.5)
            if rep < 0:
                errors.append(result["error"])
    return next((e for e in errors if not e.startswith("BrokenBarrierError")), errors[0])


# -- figures --------------------------------------------------------------------------------------


def measurements(
    system: str, per_rep: list[list[dict[str, Any]]], s: Settings, durability: str, note: str
) -> list[Measurement]:
    """calls/s, p50 and p99 per repetition, every producer's calls together."""
    _, run_s = _window(s)
    rates, p50, p99, calls, errors = [], [], [], [], 0
    for results in per_rep:
        lat = [x for r in results for x in r["lat"]]
        rates.append(sum(r["finished"] for r in results) / run_s)
        p50.append(pct(lat, 50))
        p99.append(pct(lat, 99))
        calls.append(len(lat))
        errors += sum(r["errors"] for r in results)
    note = f"{PRODUCERS} producer processes, {note}, {run_s:g} s per rep"
    if errors:
        note += f"; {errors} calls failed"
    n = min(calls)
    extra = {"producers": PRODUCERS, "window_s": run_s, "errors": errors}
    return [
        Measurement("concurrency", "calls/s", system, rates, "calls/s", durability, note, n, extra),
        Measurement("concurrency", "p50", system, p50, "ms", durability, note, n, extra),
        Measurement("concurrency", "p99", system, p99, "ms", durability, note, n, extra),
    ]


# -- the systems ----------------------------------------------------------------------------------


def lakeshore(s: Settings, plane: str) -> list[Measurement]:
    """plane: http-sqlite (synchronous=FULL) or http-postgres."""
    from . import lakeshore_runs as ls

    with (
        tempfile.TemporaryDirectory(prefix="bench-conc-") as tmp,
        ls._plane_for(plane, Path(tmp), False) as (url, token, _, dur, label),
        ls.daemons(WORKERS, "conc", home=Path(tmp), url=url, token=token),
    ):
        import dreamlake.lakeshore as dls

        with dls.HttpDispatch(url, token=token) as p:
            ls._ready(dls.SyncQueue("conc", dispatch=p))
        say(f"[concurrency]   {label}: {PRODUCERS} producers")
        per_rep = run_producers("lakeshore", {"url": url, "token": token, "queue": "conc"}, s)
    return measurements(label, per_rep, s, dur, f"{WORKERS} daemons x 1 slot")


def celery(s: Settings) -> list[Measurement]:
    """Celery on Redis, one prefork worker with 2 processes (as the fan-out suite)."""
    from .peers import runs as peer

    queue = f"lakeshore-bench-{uuid.uuid4().hex[:8]}"
    bench_env = {"BENCH_BROKER_URL": REDIS_URL, "BENCH_BACKEND_URL": REDIS_URL}
    bench_env["BENCH_QUEUE"] = queue
    peer._flush()
    with environ(**bench_env):
        sys.modules.pop("bench.peers.celery_tasks", None)
        from .peers import celery_tasks

        with peer._workers(
            [peer._celery_worker(WORKERS, queue)], "celery-redis-conc", peer._env(**bench_env)
        ):
            celery_tasks.noop.delay(0).get(timeout=60)  # the worker is up
            say(f"[concurrency]   celery (redis): {PRODUCERS} producers")
            per_rep = run_producers("celery", {}, s)
        with contextlib.suppress(Exception):
            celery_tasks.app.control.purge()
    sys.modules.pop("bench.peers.celery_tasks", None)
    return measurements(
        "celery (redis)", per_rep, s, peer.REDIS_DURABILITY, f"prefork -c {WORKERS}"
    )


def _ray_noop() -> Any:
    """The rpc suite's Ray task (bench.peers.ray_run.noop); Any, as Ray's stubs mistype it."""
    from .peers import ray_run

    return ray_run.noop


class RayProducer:
    """One Ray producer: an actor (a process of its own) calling the no-op task in a loop."""

    def ready(self) -> int:
        import ray

        return int(ray.get(_ray_noop().remote(0)))

    def run(self, start_at: float, warm_s: float, run_s: float) -> dict[str, Any]:
        import ray

        noop = _ray_noop()
        time.sleep(max(0.0, start_at - time.time()))  # all 16 start together
        return timed_calls(lambda i: ray.get(noop.remote(i), timeout=CALL_TIMEOUT_S), warm_s, run_s)


def ray(s: Settings) -> list[Measurement]:
    """A local cluster of num_cpus=2 (2 task workers); 16 producer actors of num_cpus=0."""
    try:
        import ray as ray_mod
    except ImportError as exc:
        raise ImportError(f"ray is not installed here ({exc})") from exc
    from .peers import ray_run

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    warm_s, run_s = _window(s)
    ray_run.init(WORKERS)
    try:
        noop = _ray_noop()
        ray_mod.get([noop.remote(0) for _ in range(10)])  # task workers up
        actor: Any = ray_mod.remote(num_cpus=0)(RayProducer)
        producers = [actor.remote() for _ in range(PRODUCERS)]
        ray_mod.get([p.ready.remote() for p in producers], timeout=START_TIMEOUT_S)
        say(f"[concurrency]   ray: {PRODUCERS} producer actors")
        per_rep = []
        for _ in range(s.reps):
            start_at = time.time() + 1.0
            refs = [p.run.remote(start_at, warm_s, run_s) for p in producers]
            per_rep.append(ray_mod.get(refs, timeout=START_TIMEOUT_S + warm_s + run_s))
    finally:
        ray_mod.shutdown()
    note = f"num_cpus={WORKERS}; producers are actors (num_cpus=0) of one driver, not drivers"
    return measurements("ray (local tasks)", per_rep, s, "in-memory object store", note)
