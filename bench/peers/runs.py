"""How each peer is driven: its worker processes, its RPC call, its fan-out submit.

Every peer is run the way its own documentation recommends for the figure in question, and the
table names that setting: Celery prefork (one process for RPC, 2 for fan-out) on Redis and on
RabbitMQ (with the rpc:// result backend there); RQ with SimpleWorker and with its forking
Worker; Dramatiq with its Results middleware on Redis, default processes x threads for fan-out;
SqliteHuey at its defaults and with 1 ms polling, with Huey's default fsync=False and with
fsync=True (Lakeshore's durability); arq at its default 0.5 s polling and with 1 ms polling; Ray
local tasks. Redis here keeps nothing on disk (no RDB, no AOF).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..common import (
    AMQP_URL,
    REDIS_URL,
    Measurement,
    Settings,
    bin_path,
    clean_env,
    environ,
    idle_cost,
    log_dir,
    process,
    rpc_loop,
    rpc_measurements,
    wait_for,
)

REDIS_DURABILITY = "Redis, no persistence (RDB/AOF off)"
RABBIT_DURABILITY = "RabbitMQ durable queue, persistent msgs"
COUNT_KEY = "bench:done"


def _redis() -> Any:
    import redis

    return redis.Redis.from_url(REDIS_URL)


def _flush() -> None:
    _redis().flushdb()  # db 13 is the bench's own


def _env(**extra: str) -> dict[str, str]:
    return clean_env(BENCH_REDIS_URL=REDIS_URL, **extra)


@contextlib.contextmanager
def _workers(argvs: list[list[str]], name: str, env: dict[str, str]) -> Iterator[list[Any]]:
    with contextlib.ExitStack() as stack:
        procs = [
            stack.enter_context(process(argv, log_dir() / f"{name}-{i}.log", env))
            for i, argv in enumerate(argvs)
        ]
        yield procs


def _drain_counter(n: int, cap_s: float, start: float) -> tuple[int, float]:
    """Wait until the counter reaches n (or the cap); (jobs done, seconds since start)."""
    r = _redis()
    deadline = start + cap_s
    done = 0
    while time.perf_counter() < deadline:
        done = int(r.get(COUNT_KEY) or 0)
        if done >= n:
            break
        time.sleep(0.005)
    return done, time.perf_counter() - start


def _fanout_reps(
    s: Settings,
    n: int,
    submit: Callable[[int], None],
    done_since: Callable[[int, float, float], tuple[int, float]] | None = None,
) -> tuple[list[float], list[float], int]:
    """Per repetition: submit n, then wait for completion; (submit rates, completion rates, n)."""
    wait = done_since or _drain_counter
    subs, comps = [], []
    for _ in range(s.reps):
        _redis().set(COUNT_KEY, 0)
        start = time.perf_counter()
        submit(n)
        submitted = time.perf_counter() - start
        done, elapsed = wait(n, s.fanout_cap_s, start)
        subs.append(n / submitted)
        comps.append(done / elapsed)
        # A capped repetition leaves a backlog: drain it before the next one starts.
        if done < n and wait(n, 2 * s.fanout_cap_s, time.perf_counter())[0] < n:
            break
    return subs, comps, n


def _fanout_rows(
    system: str, subs: list[float], comps: list[float], n: int, durability: str, note: str
) -> list[Measurement]:
    return [
        Measurement("fanout", "submit", system, subs, "jobs/s", durability, note, n),
        Measurement("fanout", "complete", system, comps, "jobs/s", durability, note, n),
    ]


def _idle(system: str, pid: int, s: Settings, durability: str, note: str) -> list[Measurement]:
    cpu, rss = idle_cost(pid, s.idle_s)
    return [
        Measurement("idle", "cpu", system, [cpu], "%", durability, note + " (one worker)"),
        Measurement("idle", "rss", system, [rss], "MiB", durability, note + " (one worker)"),
    ]


# -- Celery ---------------------------------------------------------------------------------------


def celery(s: Settings, broker: str) -> list[Measurement]:
    queue = f"lakeshore-bench-{uuid.uuid4().hex[:8]}"
    if broker == "redis":
        env = _env(BENCH_BROKER_URL=REDIS_URL, BENCH_BACKEND_URL=REDIS_URL, BENCH_QUEUE=queue)
        system, durability = "celery (redis)", REDIS_DURABILITY
    else:
        env = _env(BENCH_BROKER_URL=AMQP_URL, BENCH_BACKEND_URL="rpc://", BENCH_QUEUE=queue)
        system, durability = "celery (rabbitmq, rpc:// results)", RABBIT_DURABILITY
    _flush()
    try:
        with environ(**{k: v for k, v in env.items() if k.startswith("BENCH_")}):
            sys.modules.pop("bench.peers.celery_tasks", None)
            from . import celery_tasks

            return _celery_run(s, celery_tasks, env, system, durability, broker, queue)
    finally:
        sys.modules.pop("bench.peers.celery_tasks", None)


def _celery_worker(concurrency: int, queue: str) -> list[str]:
    return [
        bin_path("celery"),
        "-A",
        "bench.peers.celery_tasks",
        "worker",
        "-P",
        "prefork",
        "-c",
        str(concurrency),
        "-Q",
        queue,
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-l",
        "warning",
    ]


def _celery_run(
    s: Settings, mod: Any, env: dict[str, str], system: str, dur: str, broker: str, queue: str
) -> list[Measurement]:
    noop = mod.noop
    out: list[Measurement] = []
    with _workers([_celery_worker(1, queue)], f"celery-{broker}-rpc", env) as (proc,):
        noop.delay(0).get(timeout=60)  # ready
        reps = [
            rpc_loop(lambda i: noop.delay(i).get(timeout=10), s.calls, s.rpc_cap_s, s.warmup_calls)
            for _ in range(s.reps)
        ]
        out += rpc_measurements(system, reps, dur, "prefork -c 1")
        out += _idle(system, proc.pid, s, dur, "prefork -c 1")
    fan_env = {**env, "BENCH_COUNT_KEY": COUNT_KEY}
    with _workers([_celery_worker(2, queue)], f"celery-{broker}-fan", fan_env):
        noop.delay(0).get(timeout=60)

        def submit(n: int) -> None:
            with mod.app.producer_or_acquire() as producer:
                for i in range(n):
                    noop.apply_async((i,), producer=producer)

        subs, comps, n = _fanout_reps(s, s.jobs, submit)
    out += _fanout_rows(system, subs, comps, n, dur, "prefork -c 2, results stored")
    with contextlib.suppress(Exception):
        mod.app.control.purge()
    return out


def celery_map(s: Settings) -> list[Measurement]:
    """The map suite's Celery rows: a `group` of one task per item, and `chunks` of 1,000 items
    a task (Celery's own batching), through prefork -c 2 on Redis with results stored, items/s
    from the first send to the last result read."""
    from .. import mapping

    queue = f"lakeshore-bench-{uuid.uuid4().hex[:8]}"
    env = _env(BENCH_BROKER_URL=REDIS_URL, BENCH_BACKEND_URL=REDIS_URL, BENCH_QUEUE=queue)
    plain_n, chunked_n = mapping.sizes(s)
    _flush()
    try:
        with environ(**{k: v for k, v in env.items() if k.startswith("BENCH_")}):
            sys.modules.pop("bench.peers.celery_tasks", None)
            from celery import group

            from . import celery_tasks

            noop = celery_tasks.noop
            with _workers([_celery_worker(2, queue)], "celery-map", env):
                noop.delay(0).get(timeout=60)  # ready
                plain, chunked = [], []
                for _ in range(s.reps):
                    t0 = time.perf_counter()
                    got = group(noop.s(i) for i in range(plain_n))().get(timeout=600)
                    assert got == list(range(plain_n))
                    plain.append(plain_n / (time.perf_counter() - t0))
                    t0 = time.perf_counter()
                    parts = noop.chunks(((i,) for i in range(chunked_n)), mapping.CHUNK)
                    got = parts.group()().get(timeout=600)
                    assert sum(len(p) for p in got) == chunked_n
                    chunked.append(chunked_n / (time.perf_counter() - t0))
    finally:
        sys.modules.pop("bench.peers.celery_tasks", None)
    system, note = "celery (redis)", "prefork -c 2; group / chunks, results stored"
    return mapping.rows(system, REDIS_DURABILITY, note, plain, chunked, plain_n, chunked_n)


# -- RQ -------------------------------------------------------------------------------------------


def rq(s: Settings, worker_class: str) -> list[Measurement]:
    from redis import Redis
    from rq import Queue

    from .rq_tasks import noop

    _flush()
    conn = Redis.from_url(REDIS_URL)
    queue = Queue("bench", connection=conn)
    short = worker_class.rsplit(".", 1)[-1]
    system = f"rq ({short})"

    def worker() -> list[str]:
        return [bin_path("rq"), "worker", "-u", REDIS_URL, "-w", worker_class, "-q", "bench"]

    def call(i: int) -> object:
        job = queue.enqueue(noop, i)
        res = job.latest_result(timeout=10)
        assert res is not None
        return res.return_value

    out: list[Measurement] = []
    with _workers([worker()], f"rq-{short}-rpc", _env()) as (proc,):
        wait_for(lambda: call(0) == 0, 60, "rq worker")
        reps = [rpc_loop(call, s.calls, s.rpc_cap_s, s.warmup_calls) for _ in range(s.reps)]
        out += rpc_measurements(system, reps, REDIS_DURABILITY, "one worker")
        out += _idle(system, proc.pid, s, REDIS_DURABILITY, short)
    # The forking Worker forks per job (~150 jobs/s): a smaller batch gives the same rate.
    jobs = s.jobs if short == "SimpleWorker" else max(200, s.jobs // 5)
    env = _env(BENCH_COUNT_KEY=COUNT_KEY)
    with _workers([worker(), worker()], f"rq-{short}-fan", env):
        wait_for(lambda: call(0) == 0, 60, "rq workers")

        def submit(n: int) -> None:
            for lo in range(0, n, 1000):
                datas = [Queue.prepare_data(noop, (i,)) for i in range(lo, min(n, lo + 1000))]
                queue.enqueue_many(datas)

        subs, comps, n = _fanout_reps(s, jobs, submit)
    out += _fanout_rows(system, subs, comps, n, REDIS_DURABILITY, "2 workers, enqueue_many")
    return out


# -- Dramatiq -------------------------------------------------------------------------------------


def dramatiq(s: Settings) -> list[Measurement]:
    import os

    queue = f"bench-{uuid.uuid4().hex[:8]}"
    os.environ["BENCH_QUEUE"] = queue
    os.environ["BENCH_REDIS_URL"] = REDIS_URL
    sys.modules.pop("bench.peers.dramatiq_tasks", None)
    from . import dramatiq_tasks

    _flush()
    noop = dramatiq_tasks.noop
    system = "dramatiq (redis, results)"
    env = _env(BENCH_QUEUE=queue)

    def worker(processes: int, threads: int | None) -> list[str]:
        argv = [bin_path("dramatiq"), "bench.peers.dramatiq_tasks", "--processes", str(processes)]
        return argv + (["--threads", str(threads)] if threads else [])

    def call(i: int) -> object:
        return noop.send(i).get_result(block=True, timeout=10_000)

    out: list[Measurement] = []
    with _workers([worker(1, None)], "dramatiq-rpc", env) as (proc,):
        wait_for(lambda: noop.send(0).get_result(block=True, timeout=2000) == 0, 60, "dramatiq")
        reps = [rpc_loop(call, s.calls, s.rpc_cap_s, s.warmup_calls) for _ in range(s.reps)]
        out += rpc_measurements(system, reps, REDIS_DURABILITY, "1 process x 8 threads")
        out += _idle(system, proc.pid, s, REDIS_DURABILITY, "1 process x 8 threads")
    with _workers([worker(2, None)], "dramatiq-fan", {**env, "BENCH_COUNT_KEY": COUNT_KEY}):
        wait_for(lambda: noop.send(0).get_result(block=True, timeout=2000) == 0, 60, "dramatiq")

        def submit(n: int) -> None:
            for i in range(n):
                noop.send(i)

        subs, comps, n = _fanout_reps(s, s.jobs, submit)
    out += _fanout_rows(system, subs, comps, n, REDIS_DURABILITY, "2 processes x 8 threads")
    return out


# -- Huey -----------------------------------------------------------------------------------------


def huey(s: Settings, fast_poll: bool, fsync: bool) -> list[Measurement]:
    import os

    out: list[Measurement] = []
    with tempfile.TemporaryDirectory(prefix="bench-huey-") as tmp:
        db = str(Path(tmp) / "huey.db")
        os.environ["BENCH_HUEY_DB"] = db
        os.environ["BENCH_HUEY_FSYNC"] = "1" if fsync else "0"
        sys.modules.pop("bench.peers.huey_tasks", None)
        from . import huey_tasks

        env = _env(BENCH_HUEY_DB=db, BENCH_HUEY_FSYNC="1" if fsync else "0")
        poll = ["-d", "0.001", "-m", "0.001", "-b", "1.0"] if fast_poll else []
        setting = "1 ms polling" if fast_poll else "default polling"
        durability = "SQLite fsync=True" if fsync else "SQLite, Huey default fsync=False"
        system = f"huey (SqliteHuey, {setting}{', fsync' if fsync else ''})"
        get_kw: dict[str, Any] = (
            {"backoff": 1.0, "max_delay": 0.001} if fast_poll else {}  # defaults: 0.05 s x1.15
        )

        def worker(workers: int, kind: str) -> list[str]:
            return [
                bin_path("huey_consumer"),
                "bench.peers.huey_tasks.huey",
                "-w",
                str(workers),
                "-k",
                kind,
                "-n",
                *poll,
            ]

        def call(i: int) -> object:
            return huey_tasks.noop(i).get(blocking=True, timeout=10, **get_kw)

        with _workers([worker(1, "thread")], f"huey-rpc-{fast_poll}-{fsync}", env) as (proc,):
            wait_for(lambda: call(0) == 0, 60, "huey consumer")
            reps = [rpc_loop(call, s.calls, s.rpc_cap_s, s.warmup_calls) for _ in range(s.reps)]
            out += rpc_measurements(system, reps, durability, "1 thread worker")
            if not fsync:
                out += _idle(system, proc.pid, s, durability, setting)
        fan_env = {**env, "BENCH_COUNT_KEY": COUNT_KEY}
        with _workers([worker(2, "process")], f"huey-fan-{fast_poll}-{fsync}", fan_env):
            wait_for(lambda: call(0) == 0, 60, "huey consumer")

            def submit(n: int) -> None:
                for i in range(n):
                    huey_tasks.noop(i)

            subs, comps, n = _fanout_reps(s, s.jobs, submit)
        out += _fanout_rows(system, subs, comps, n, durability, "-w 2 -k process")
        huey_tasks.huey.storage.close()
    return out


# -- arq ------------------------------------------------------------------------------------------


def arq(s: Settings, poll_s: float) -> list[Measurement]:
    return asyncio.run(_arq(s, poll_s))


async def _arq(s: Settings, poll_s: float) -> list[Measurement]:
    from arq.connections import RedisSettings, create_pool
    from arq.jobs import ResultNotFound

    _flush()
    queue = f"arq:bench-{uuid.uuid4().hex[:8]}"
    setting = "default 0.5 s polling" if poll_s >= 0.5 else f"{poll_s * 1000:g} ms polling"
    system = f"arq ({setting})"
    env = _env(BENCH_QUEUE=queue, BENCH_ARQ_POLL=str(poll_s))
    pool = await create_pool(RedisSettings.from_dsn(REDIS_URL), default_queue_name=queue)
    argv = [bin_path("arq"), "bench.peers.arq_tasks.WorkerSettings"]

    async def call(i: int) -> object:
        job = await pool.enqueue_job("noop", i)
        assert job is not None
        deadline = time.monotonic() + 10
        while True:  # arq's result() can race the worker's own bookkeeping at 1 ms polling
            try:
                return await job.result(timeout=10, poll_delay=poll_s)
            except ResultNotFound:
                if time.monotonic() > deadline:
                    raise
                info = await job.result_info()
                if info is not None:
                    return info.result
                await asyncio.sleep(poll_s)

    async def loop(n: int) -> list[float]:
        for i in range(s.warmup_calls if poll_s < 0.5 else 2):
            await call(i)
        lat: list[float] = []
        deadline = time.monotonic() + s.rpc_cap_s
        for i in range(n):
            t = time.perf_counter()
            await call(i)
            lat.append((time.perf_counter() - t) * 1000)
            if time.monotonic() > deadline and len(lat) >= 5:
                break
        return lat

    out: list[Measurement] = []
    try:
        with _workers([argv], f"arq-rpc-{poll_s}", env) as (proc,):
            await asyncio.wait_for(call(0), 60)
            reps = [await loop(s.calls) for _ in range(s.reps)]
            out += rpc_measurements(system, reps, REDIS_DURABILITY, "one worker")
            out += _idle(system, proc.pid, s, REDIS_DURABILITY, setting)
        # At its default 0.5 s polling arq drains a few hundred a second: a fifth of the jobs.
        jobs = s.jobs if poll_s < 0.5 else max(200, s.jobs // 5)
        fan_env = {**env, "BENCH_COUNT_KEY": COUNT_KEY}
        subs, comps = await _arq_fanout(s, pool, argv, fan_env, call, jobs)
        out += _fanout_rows(system, subs, comps, jobs, REDIS_DURABILITY, "2 workers")
    finally:
        await pool.aclose()
    return out


async def _arq_fanout(
    s: Settings, pool: Any, argv: list[str], env: dict[str, str], call: Any, jobs: int
) -> tuple[list[float], list[float]]:
    with _workers([argv, argv], "arq-fan", env):
        await asyncio.wait_for(call(0), 60)
        subs, comps = [], []
        for _ in range(s.reps):
            _redis().set(COUNT_KEY, 0)
            start = time.perf_counter()
            for i in range(jobs):
                await pool.enqueue_job("noop", i)
            subs.append(jobs / (time.perf_counter() - start))
            done, elapsed = await asyncio.to_thread(_drain_counter, jobs, s.fanout_cap_s, start)
            comps.append(done / elapsed)
            if done < jobs:  # drain the backlog before the next repetition
                rest = await asyncio.to_thread(
                    _drain_counter, jobs, 2 * s.fanout_cap_s, time.perf_counter()
                )
                if rest[0] < jobs:
                    break
    return subs, comps


# -- Ray ------------------------------------------------------------------------------------------


def ray_child(
    *args: str, module: str = "ray_run", cwd: Path | None = None, timeout: float = 600
) -> Any:
    """Run `bench.peers.<module>` (ray_run by default) with `args` in its own interpreter (its
    local cluster is torn down with it), from `cwd` (the repository's root by default); the
    JSON of its last output line."""
    try:
        import ray as _ray  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"ray is not installed here ({exc})") from exc
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", f"bench.peers.{module}", *args],
        env=clean_env(RAY_DEDUP_LOGS="0", RAY_USAGE_STATS_ENABLED="0"),
        capture_output=True,
        timeout=timeout,
        cwd=cwd or root,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"ray run failed: {done.stderr.decode(errors='replace')[-2000:]}")
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


def ray(s: Settings) -> list[Measurement]:
    args = {
        "calls": s.calls,
        "jobs": s.jobs,
        "reps": s.reps,
        "cap": s.rpc_cap_s,
        "warmup": s.warmup_calls,
    }
    data = ray_child(json.dumps(args))
    system, dur = "ray (local tasks)", "in-memory object store"
    out = rpc_measurements(system, data["rpc"], dur, "num_cpus=1")
    out += _fanout_rows(system, data["submit"], data["complete"], s.jobs, dur, "num_cpus=2")
    return out


def ray_map(s: Settings) -> list[Measurement]:
    """The map suite's Ray rows: `ray.get([f.remote(x) for x in xs])` at both of the suite's
    sizes (Ray has no chunking: the larger size is still one task per item)."""
    from .. import mapping

    plain_n, chunked_n = mapping.sizes(s)
    args = {"plain": plain_n, "large": chunked_n, "reps": s.reps}
    data = ray_child("map", json.dumps(args))
    system, dur = "ray (local tasks)", "in-memory object store"
    note = "num_cpus=2; one task per item at both sizes"
    return mapping.rows(system, dur, note, data["plain"], data["large"], plain_n, chunked_n)
