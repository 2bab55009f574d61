"""Every listing page is an index walk in listing order: no sort, no OFFSET (issue 17, item 2).

`jobs ls` / `GET .../invocations` offer four filter combinations (none, queue, state, both) and a
first page or a `before=` page; each is its own statement (queries.sql, list_invocations*). Here
each one's plan is read from the engine: SQLite's EXPLAIN QUERY PLAN must search an index of the
listing (no "USE TEMP B-TREE FOR ORDER BY"), Postgres's EXPLAIN must hold no Sort node, both for
the plan made with the values and for the generic plan a prepared statement falls back to.
The time that buys is measured in bench/depth_listing.py.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Iterator
from itertools import product
from pathlib import Path
from typing import Any

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane.queries import POSTGRES, SQLITE, bind, queries
from dreamlake.lakeshore.plane.store.invocations import listing_statement

#: (queue, state, before) of every page the listing offers.
COMBINATIONS = list(product([None, "deep"], [None, "queued"], [None, "01J0000000000000000000ZZZZ"]))
#: The index each filter combination must walk (migration 19).
INDEX = {
    (False, False): "invocations_listing",
    (True, False): "invocations_listing_queue",
    (False, True): "invocations_listing_state",
    (True, True): "invocations_listing_queue_state",
}


def _name(combo: tuple[str | None, str | None, str | None]) -> str:
    return listing_statement(*combo)


def _params(queue: str | None, state: str | None, before: str | None) -> dict[str, Any]:
    given = {"ns": "default", "queue": queue, "state": state, "before": before, "limit": 20}
    return {k: v for k, v in given.items() if v is not None}


def _seed(plane: dls.Dispatch) -> None:
    """Rows in two queues and three states, so that no filter is trivially the whole table."""
    for name in ("deep", "other"):
        q = dls.SyncQueue(name, dispatch=plane)
        q.submit_many(list(range(300)))
    worker = dls.SyncQueue("other", dispatch=plane)
    for _ in range(50):
        job = worker.claim()
        assert job is not None
        if job.payload % 2:
            worker.ack(job)


# -- SQLite ------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["no statistics", "analyzed"])
def sqlite_db(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("plans") / "plane.db"
    with dls.Dispatch(path) as plane:
        _seed(plane)
    if request.param == "analyzed":
        with sqlite3.connect(path) as conn:
            conn.execute("ANALYZE")
    return path


@pytest.mark.parametrize("combo", COMBINATIONS, ids=_name)
def test_sqlite_walks_the_listing_index_without_a_sort(
    sqlite_db: Path, combo: tuple[str | None, str | None, str | None]
) -> None:
    queue, state, before = combo
    sql = queries(SQLITE)[_name(combo)]
    with sqlite3.connect(sqlite_db) as conn:
        plan = [r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", _params(*combo))]

    assert not any("TEMP B-TREE" in step for step in plan), plan
    # Per listed row, its pending reason and words (migration 35): one probe of a primary key
    # each, not a walk of their own.
    walk = [step for step in plan if not step.startswith("CORRELATED SCALAR SUBQUERY")]
    lookups = walk[1:]
    assert lookups == ["SEARCH r USING INDEX sqlite_autoindex_pending_reasons_1 (id=?)"] * 2, plan
    step = walk[0]
    assert step.startswith("SEARCH invocations USING INDEX "), plan
    assert (
        step.split(" USING INDEX ")[1].split()[0] == INDEX[(queue is not None, state is not None)]
    )
    assert ("id<?" in step) == (before is not None), plan  # the page starts by a seek
    code = " ".join(line for line in sql.splitlines() if not line.startswith("--"))
    assert "OFFSET" not in code.upper()


# -- Postgres ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def postgres_conn() -> Iterator[Any]:
    root = str(Path(__file__).resolve().parents[2])
    if root not in sys.path:  # `tests.support` imports however pytest was started
        sys.path.insert(0, root)
    from tests.support.postgres import postgres_schema

    psycopg = pytest.importorskip("psycopg")
    with postgres_schema("lakeshore_plans") as url:
        with dls.Dispatch(url) as plane:
            _seed(plane)
        from dreamlake.lakeshore.plane.postgres import parse_url

        conninfo, _ = parse_url(url)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            # A deep queue as the planner sees one: many rows in one queue and state.
            conn.execute(
                "INSERT INTO invocations (id, namespace, queue, state, created_at) "
                "SELECT 'S' || lpad(g::text, 25, '0'), 'default', 'deep', 'queued', 0 "
                "FROM generate_series(1, 20000) AS g"
            )
            conn.execute("ANALYZE invocations")
            yield conn


def _nodes(plan: dict[str, Any]) -> Iterator[str]:
    yield plan["Node Type"]
    for child in plan.get("Plans", []):
        yield from _nodes(child)


@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
@pytest.mark.parametrize("combo", COMBINATIONS, ids=_name)
def test_postgres_plan_has_no_sort(
    postgres_conn: Any, combo: tuple[str | None, str | None, str | None], generic: bool
) -> None:
    queue, state, _ = combo
    sql, params = bind(POSTGRES, queries(POSTGRES)[_name(combo)], _params(*combo))
    if generic:
        postgres_conn.execute("SET plan_cache_mode = force_generic_plan")
        try:
            # The plan a prepared statement uses after five runs: made without the values.
            postgres_conn.execute("PREPARE listing AS " + _positional(sql, params))
            try:
                values = ", ".join(_literal(v) for v in params.values())
                rows = postgres_conn.execute(
                    f"EXPLAIN (FORMAT JSON) EXECUTE listing({values})"
                ).fetchall()
            finally:
                postgres_conn.execute("DEALLOCATE listing")
        finally:
            postgres_conn.execute("RESET plan_cache_mode")
    else:
        rows = postgres_conn.execute("EXPLAIN (FORMAT JSON) " + sql, params).fetchall()
    document = rows[0][0]
    plan = (json.loads(document) if isinstance(document, str) else document)[0]["Plan"]
    nodes = list(_nodes(plan))

    assert "Sort" not in nodes and "Incremental Sort" not in nodes, nodes
    assert nodes[0] == "Limit" and nodes[1] in ("Index Scan", "Index Only Scan"), nodes
    # Postgres may also walk the primary key (id) and filter, where its statistics say nearly
    # every row matches (here: one namespace, mostly queued): listing order still, no sort.
    scan = plan["Plans"][0]
    assert scan["Index Name"] in (INDEX[(queue is not None, state is not None)], "invocations_pkey")
    assert scan["Scan Direction"] == "Backward"


def _positional(sql: str, params: dict[str, Any]) -> str:
    """`%(name)s` placeholders as `$n` with a type, for PREPARE."""
    for i, (name, value) in enumerate(params.items(), start=1):
        sql = sql.replace(f"%({name})s", f"${i}::{'bigint' if isinstance(value, int) else 'text'}")
    return sql


def _literal(value: Any) -> str:
    return str(value) if isinstance(value, int) else "'" + str(value).replace("'", "''") + "'"
