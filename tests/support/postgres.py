"""The PostgreSQL server the postgres tests run against, and work for their child processes.

Rule (procrastinate's, dramatiq's): no server reachable -> the test skips with the reason, unless
`CI=true`, where a missing server is a broken pipeline and the test fails. The server is
`$LAKESHORE_TEST_POSTGRES_URL`, by default the local one with trust auth. Every test works in its
own fresh schema (`postgres_schema()`), dropped with CASCADE afterwards.

The `*_worker` functions run in spawned child processes (`in_processes`): they live here, in an
importable module, because a spawned child imports its target by module name.
"""

from __future__ import annotations

import multiprocessing
import os
import queue as queue_mod
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from typing import Any

import pytest

from tests.support import claiming

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


def postgres_url() -> str:
    return os.environ.get("LAKESHORE_TEST_POSTGRES_URL") or DEFAULT_URL


@cache
def _unreachable(url: str) -> str | None:
    """Why the server cannot be used, or None. Asked once per session."""
    try:
        import psycopg
    except ImportError as exc:
        return f"psycopg is not installed ({exc}); pip install 'dreamlake-lakeshore[postgres]'"
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"{type(exc).__name__}: {str(exc).strip()}"
    return None


def require_postgres() -> str:
    """The server's URL; skip the test (fail it under CI=true) when it cannot be reached."""
    url = postgres_url()
    problem = _unreachable(url)
    if problem is not None:
        message = (
            f"PostgreSQL unreachable at {url} ({problem}); start one or point "
            "LAKESHORE_TEST_POSTGRES_URL at it"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}. CI=true: a missing server fails the run", pytrace=False)
        pytest.skip(message)
    return url


@contextmanager
def postgres_schema(prefix: str = "lakeshore_test") -> Iterator[str]:
    """A URL selecting a fresh schema (`?schema=`), dropped with everything in it afterwards."""
    from dreamlake.lakeshore.plane.postgres import scratch_schema

    with scratch_schema(require_postgres(), prefix) as url:
        yield url


# -- child processes ---------------------------------------------------------------------------


def in_processes(
    target: Callable[..., Any], args: Sequence[tuple[Any, ...]], *, timeout: float = 60.0
) -> list[Any]:
    """Run `target(*a)` for each `a` in its own spawned process, all released at one barrier.

    Returns the results in the order of `args`; a child's exception fails the test with its
    traceback.
    """
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(args))
    results: multiprocessing.Queue[tuple[int, bool, Any]] = ctx.Queue()
    procs = [
        ctx.Process(target=_child, args=(target, i, a, barrier, results), daemon=True)
        for i, a in enumerate(args)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    answers: dict[int, Any] = {}
    try:
        for _ in procs:
            try:
                i, ok, value = results.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue_mod.Empty:
                raise AssertionError(f"child processes gave no answer in {timeout}s") from None
            if not ok:
                raise AssertionError(f"child {i} failed:\n{value}")
            answers[i] = value
    finally:
        for p in procs:
            p.join(timeout=max(0.1, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join()
        results.close()
        results.join_thread()
    return [answers[i] for i in range(len(args))]


def _child(
    target: Callable[..., Any],
    index: int,
    args: tuple[Any, ...],
    barrier: Any,
    results: multiprocessing.Queue[tuple[int, bool, Any]],
) -> None:
    try:
        barrier.wait(timeout=60)
        results.put((index, True, target(*args)))
    except BaseException:
        results.put((index, False, traceback.format_exc()))


def migrate_worker(url: str) -> str:
    from dreamlake.lakeshore.plane.postgres import PostgresConnector

    connector = PostgresConnector(url)
    connector.close()
    return connector.schema


def claim_all_worker(url: str, queue: str) -> list[str]:
    """Claim and ack until the queue looks empty; the ids this process got."""
    import dreamlake.lakeshore as dls

    got: list[str] = []
    with dls.Dispatch(url) as plane:
        while (claim := claiming.claim(plane, [queue], worker=f"w{os.getpid()}")) is not None:
            plane.ack(claim.id, claim.lease, None)
            got.append(claim.id)
    return got


def submit_key_worker(url: str, queue: str, key: str, n: int) -> list[str]:
    import dreamlake.lakeshore as dls

    with dls.Dispatch(url) as plane:
        q = dls.SyncQueue(queue, dispatch=plane)
        return [q.submit({"attempt": i}, key=key) for i in range(n)]


def submit_worker(url: str, queue: str, payload: Any) -> str:
    import dreamlake.lakeshore as dls

    with dls.Dispatch(url) as plane:
        return dls.SyncQueue(queue, dispatch=plane).submit(payload)
