"""The Postgres plane beside pgqueuer and procrastinate, on the same server, each in its own schema.

Submit: each system's one-job enqueue call, one transaction per job, from one client.
Drain: one worker takes and finishes every job, one at a time where the peer allows it:
Lakeshore claim + ack (two transactions: leased, then settled); procrastinate's worker
(fetch_job + finish_job) at concurrency 1; pgqueuer's QueueManager in drain mode, at batch_size
1 and at its default 10 (it dequeues and acknowledges in batches).
Every system runs with the server's defaults (synchronous_commit on): same durability.
Each figure is the best of --repeat runs, every run in fresh schemas.
Peers that are not installed are left out. This is a benchmark, not a test: it asserts nothing.
Run: .venv/bin/python -m bench.postgres_plane [--jobs N] [--url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane.postgres import parse_url, scratch_schema

from .report import Row, render

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


def timed(n: int, fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return n / (time.perf_counter() - start)


async def timed_async(n: int, fn: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await fn()
    return n / (time.perf_counter() - start)


def lakeshore(url: str, n: int) -> tuple[float, float, float]:
    with scratch_schema(url, "bench_lakeshore") as scoped, dls.Dispatch(scoped) as plane:
        q = dls.SyncQueue("bench", dispatch=plane)
        submit = timed(n, lambda: [q.submit({"i": i}) for i in range(n)])

        def drain() -> None:
            for _ in range(n):
                job = q.claim()
                assert job is not None
                q.ack(job)

        drained = timed(n, drain)
        batch = timed(
            n, lambda: [q.submit_many([{"i": i} for i in range(500)]) for _ in range(n // 500)]
        )
    return submit, drained, batch


async def procrastinate_run(url: str, n: int) -> tuple[float, float]:
    import procrastinate

    logging.getLogger("procrastinate").setLevel(logging.ERROR)  # its notes on app placement
    with scratch_schema(url, "bench_procrastinate") as scoped:
        conninfo, _ = parse_url(scoped)
        app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo))

        @app.task(name="noop")
        def noop(i: int) -> None:
            return None

        async with app.open_async():
            await app.schema_manager.apply_schema_async()

            async def submit_all() -> None:
                for i in range(n):
                    await noop.defer_async(i=i)

            submit = await timed_async(n, submit_all)
            drained = await timed_async(
                n,
                lambda: app.run_worker_async(
                    wait=False, concurrency=1, install_signal_handlers=False
                ),
            )
    return submit, drained


async def pgqueuer_run(url: str, n: int, batch_size: int) -> tuple[float, float]:
    import psycopg
    from pgqueuer.db import PsycopgDriver
    from pgqueuer.models import Job
    from pgqueuer.qm import QueueManager
    from pgqueuer.queries import Queries
    from pgqueuer.types import QueueExecutionMode

    with scratch_schema(url, "bench_pgqueuer") as scoped:
        conninfo, _ = parse_url(scoped)
        conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
        try:
            queries = Queries(PsycopgDriver(conn))
            await queries.install()

            async def submit_all() -> None:
                for i in range(n):
                    await queries.enqueue("noop", str(i).encode())

            submit = await timed_async(n, submit_all)
            qm = QueueManager(queries)

            @qm.entrypoint("noop")
            async def noop(job: Job) -> None:
                return None

            drained = await timed_async(
                n,
                lambda: qm.run(
                    mode=QueueExecutionMode.drain,
                    batch_size=batch_size,
                    dequeue_timeout=timedelta(seconds=1),
                ),
            )
        finally:
            await conn.close()
    return submit, drained


def peer(name: str, run: Callable[[], tuple[float, float]]) -> tuple[float, float] | None:
    try:
        return run()
    except ImportError as exc:
        print(f"({name} left out: {exc})")
        return None


def measure(url: str, n: int) -> list[Row]:
    ls_submit, ls_drain, ls_batch = lakeshore(url, n)
    rows = [
        Row("submit", "lakeshore", ls_submit, "ops/s"),
        Row("submit", "lakeshore batch 500", ls_batch, "ops/s", "one transaction per 500"),
        Row("drain", "lakeshore", ls_drain, "ops/s", "claim + ack, leased"),
    ]
    pr = peer("procrastinate", lambda: asyncio.run(procrastinate_run(url, n)))
    if pr is not None:
        rows.insert(0, Row("submit", "procrastinate", pr[0], "ops/s"))
        rows.append(Row("drain", "procrastinate", pr[1], "ops/s", "worker, concurrency 1"))
    for batch_size in (1, 10):
        pq = peer("pgqueuer", functools.partial(asyncio.run, pgqueuer_run(url, n, batch_size)))
        if pq is None:
            break
        if batch_size == 1:
            rows.insert(0, Row("submit", "pgqueuer", pq[0], "ops/s"))
        rows.append(Row("drain", f"pgqueuer batch {batch_size}", pq[1], "ops/s", "drain mode"))
    return rows


BASELINES: dict[str, Any] = {"submit": "procrastinate", "drain": "procrastinate"}


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs; each figure is the best (the box is shared)"
    )
    parser.add_argument(
        "--url", default=os.environ.get("LAKESHORE_TEST_POSTGRES_URL") or DEFAULT_URL
    )
    args = parser.parse_args(argv)
    best: dict[tuple[str, str], Row] = {}
    for _ in range(args.repeat):
        for row in measure(args.url, args.jobs):
            key = (row.group, row.system)
            if key not in best or row.value > best[key].value:
                best[key] = row
    rows = list(best.values())
    render(f"Postgres plane, {args.jobs} jobs, best of {args.repeat}", rows, BASELINES)
    return rows


if __name__ == "__main__":
    main()
