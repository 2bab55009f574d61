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
import secrets
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from typing import Any
from urllib.parse import urlsplit

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


#: A schema whose tables and indexes grew past this in its test is dropped, not handed on
#: (a freshly migrated one holds about 0.35 MB, nearly all of it empty index pages).
REUSE_MAX_BYTES = 1 << 20


class SchemaPool:
    """Migrated schemas for one process's tests, each emptied after its test and handed on.

    A fresh schema costs its CREATE, the plane's migrations and a DROP (about half a second
    on a loaded 2-core box); the conformance suite's postgres plane takes one per test, some
    230 times a run. A schema handed on holds what a fresh one holds once the plane has opened
    it: every table empty, every sequence at its start, the migrations recorded. One that
    still has a connection on it after its test, or whose migrations were touched, is dropped
    instead, so no test ever sees what another left.
    """

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._free: list[str] = []
        self._made: list[str] = []

    @contextmanager
    def schema(self) -> Iterator[str]:
        """A URL selecting an empty migrated schema of this pool, for the length of a test."""
        url = self._free.pop() if self._free else self._new()
        try:
            yield url
        finally:
            if self._empty(url):
                self._free.append(url)
            else:
                self._drop(url)

    def close(self) -> None:
        for url in self._made:
            self._drop(url)
        self._free.clear()

    def _new(self) -> str:
        import psycopg
        from psycopg import sql

        base = require_postgres()
        name = f"{self._prefix}_{secrets.token_hex(6)}"
        with psycopg.connect(_conninfo(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        url = f"{base}{'&' if urlsplit(base).query else '?'}schema={name}"
        self._made.append(url)
        return url

    def _drop(self, url: str) -> None:
        import psycopg
        from psycopg import sql

        if url in self._made:
            self._made.remove(url)
        with psycopg.connect(_conninfo(), autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(_schema(url)))
            )

    def _empty(self, url: str) -> bool:
        """Empty the schema for the next test; False when it cannot be handed on."""
        import psycopg
        from psycopg import sql

        from dreamlake.lakeshore.plane.postgres import POSTGRES
        from dreamlake.lakeshore.plane.queries import migrations

        schema = _schema(url)
        with psycopg.connect(_conninfo(), autocommit=True) as conn:
            # The plane's connections name their schema (`lakeshore-<role> <schema>`); a
            # process that closed its plane leaves pg_stat_activity a moment later.
            deadline = time.monotonic() + 2.0
            while conn.execute(
                "SELECT 1 FROM pg_stat_activity WHERE application_name LIKE %s "
                "AND pid <> pg_backend_pid()",
                (f"lakeshore-% {schema}",),
            ).fetchone():
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.02)
            versions = conn.execute(
                sql.SQL("SELECT count(*) FROM {}.schema_version").format(sql.Identifier(schema))
            ).fetchone()
            if versions is None or versions[0] != len(migrations(POSTGRES)):
                return False
            listed = conn.execute(
                "SELECT tablename, pg_total_relation_size(format('%%I.%%I', schemaname, "
                "tablename)) FROM pg_tables WHERE schemaname = %s AND tablename <> "
                "'schema_version'",
                (schema,),
            ).fetchall()
            if sum(size for _, size in listed) > REUSE_MAX_BYTES:
                return False  # what a long test left (dead rows, grown indexes) is not fresh
            tables = [table for table, _ in listed]
            # Invocations first: their delete trigger writes the counters, emptied after.
            tables.sort(key=lambda t: (t != "invocations", t == "queue_counts", t))
            sequences = [
                r[0]
                for r in conn.execute(
                    "SELECT sequencename FROM pg_sequences WHERE schemaname = %s", (schema,)
                )
            ]
            with conn.transaction():
                # the counter trigger names its table unqualified, as the plane's own
                # connections see it
                conn.execute(sql.SQL("SET LOCAL search_path = {}").format(sql.Identifier(schema)))
                for table in tables:
                    conn.execute(
                        sql.SQL("DELETE FROM {}.{}").format(
                            sql.Identifier(schema), sql.Identifier(table)
                        )
                    )
                for sequence in sequences:
                    conn.execute(
                        sql.SQL("ALTER SEQUENCE {}.{} RESTART").format(
                            sql.Identifier(schema), sql.Identifier(sequence)
                        )
                    )
        return True


def _conninfo() -> str:
    from dreamlake.lakeshore.plane.postgres import parse_url

    return parse_url(require_postgres())[0]


def _schema(url: str) -> str:
    return url.rsplit("schema=", 1)[1].split("&", 1)[0]


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
