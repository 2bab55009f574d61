"""Named SQL: sections, dialect words, parameter binding and list expansion."""

from __future__ import annotations

import inspect
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.plane import store
from dreamlake.lakeshore.plane.queries import (
    POSTGRES,
    SQLITE,
    Dialect,
    bind,
    migrations,
    queries,
    split_statements,
)
from dreamlake.lakeshore.plane.sqlite import add_functions


def test_bind_without_lists_writes_the_dialect_style_and_keeps_params() -> None:
    sql, params = bind(SQLITE, "SELECT * FROM t WHERE a = :a AND b = :b", {"a": 1, "b": "x"})

    assert sql == "SELECT * FROM t WHERE a = :a AND b = :b"
    assert params == {"a": 1, "b": "x"}


def test_bind_in_postgres_style() -> None:
    sql, _ = bind(POSTGRES, "SELECT * FROM t WHERE a = :a", {"a": 1})

    assert sql == "SELECT * FROM t WHERE a = %(a)s"


def test_bind_expands_a_list_into_one_placeholder_per_element() -> None:
    sql, params = bind(
        SQLITE,
        "SELECT 1 WHERE q IN (:queues) AND ns = :ns",
        {"queues": ["a", "b", "c"], "ns": "default"},
    )

    assert sql == "SELECT 1 WHERE q IN (:queues__0, :queues__1, :queues__2) AND ns = :ns"
    assert params == {"ns": "default", "queues__0": "a", "queues__1": "b", "queues__2": "c"}


def test_bind_expands_tuples_and_an_empty_list_matches_nothing() -> None:
    sql, params = bind(POSTGRES, "SELECT 1 WHERE q IN (:queues)", {"queues": ()})

    assert sql == "SELECT 1 WHERE q IN (NULL)"
    assert params == {}
    with sqlite3.connect(":memory:") as db:
        sql, params = bind(SQLITE, "SELECT 1 WHERE 'a' IN (:queues)", {"queues": []})
        assert db.execute(sql, params).fetchall() == []
    db.close()


def test_bind_leaves_casts_and_words_alone() -> None:
    sql, _ = bind(POSTGRES, "SELECT x::text, :a FROM t", {"a": 1})

    assert sql == "SELECT x::text, %(a)s FROM t"


def test_bound_lists_run_on_sqlite() -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (q TEXT)")
    db.executemany("INSERT INTO t VALUES (?)", [("a",), ("b",), ("c",)])

    sql, params = bind(
        SQLITE, "SELECT q FROM t WHERE q IN (:queues) ORDER BY q", {"queues": ["a", "c"]}
    )

    assert db.execute(sql, params).fetchall() == [("a",), ("c",)]
    db.close()


def test_dialects_fill_in_their_words_and_keep_unknown_ones() -> None:
    assert SQLITE.render("{blob} {real} {skip_locked}") == "BLOB REAL "
    assert POSTGRES.render("{blob} {skip_locked}") == "BYTEA FOR UPDATE SKIP LOCKED"
    assert Dialect("x", {}, ":{}").render("{mystery}") == "{mystery}"


def test_sections_are_named_and_rendered_per_dialect() -> None:
    sq, pg = queries(SQLITE), queries(POSTGRES)

    assert set(sq) == set(pg)
    assert {"claim_fifo", "claim_filo", "claim_level", "settle_success"} <= set(sq)
    assert "FOR UPDATE SKIP LOCKED" in pg["claim_fifo"]
    assert "{skip_locked}" not in sq["claim_fifo"] and "FOR UPDATE" not in sq["claim_fifo"]
    assert all(body.strip() for body in sq.values())


def test_every_query_the_store_names_exists() -> None:
    folder = Path(inspect.getfile(store)).parent
    source = "\n".join(f.read_text() for f in sorted(folder.glob("*.py")))
    used = set(re.findall(r"tx\.(?:one|all)\(\s*\"([a-z_]+)\"", source))

    assert used, "the pattern no longer finds the store's queries"
    assert used - set(queries(SQLITE)) == set()


def test_migrations_are_numbered_and_rendered() -> None:
    sq = migrations(SQLITE)
    pg = migrations(POSTGRES)

    assert [v for v, _ in sq] == sorted(v for v, _ in sq) and sq[0][0] == 1
    assert "BIGSERIAL PRIMARY KEY" in pg[0][1] and "{serial}" not in pg[0][1]
    assert "INTEGER PRIMARY KEY" in sq[0][1]


def test_split_statements_drops_comments_and_blanks() -> None:
    parts = split_statements(
        "-- a comment\nCREATE TABLE a (x INT);\n\n-- more\nCREATE TABLE b (y INT);\n"
    )

    assert parts == ["CREATE TABLE a (x INT)", "CREATE TABLE b (y INT)"]


@pytest.fixture
def migrated() -> Iterator[sqlite3.Connection]:
    db = sqlite3.connect(":memory:")
    add_functions(db)  # REGEXP, as the connector's connections have it
    for _, sql in migrations(SQLITE):
        for statement in split_statements(sql):
            db.execute(statement)
    yield db
    db.close()


@pytest.mark.parametrize("name", sorted(queries(SQLITE)))
def test_every_query_compiles_on_sqlite(migrated: sqlite3.Connection, name: str) -> None:
    text = queries(SQLITE)[name]
    names = set(re.findall(r"(?<![:\w]):([a-z_][a-z0-9_]*)", text))
    lists = set(re.findall(r"IN \(:([a-z_][a-z0-9_]*)\)", text))
    params = {n: (["x", "y"] if n in lists else None) for n in names}

    sql, flat = bind(SQLITE, text, params)

    migrated.execute(f"EXPLAIN {sql}", flat)  # raises on a syntax or schema error


# -- what no database holds: refused where the store's input meets SQL ---------------------------


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"key": "a\x00b"}, "key contains a NUL character"),
        ({"description": "a\ud800"}, "description contains a lone surrogate"),
        ({"ns": "\x00"}, "namespace contains a NUL"),  # the word a caller knows
        ({"queues": ["ok", "q\x00"]}, "queue contains a NUL"),  # inside a list, too
        ({"since": 2**63}, "since is 9223372036854775808, outside the 64-bit"),
        ({"pid": -(2**63) - 1}, "pid is -9223372036854775809, outside the 64-bit"),
        ({"limit": 10**4000}, "limit is a 13288-bit number"),
    ],
)
def test_bind_refuses_what_no_database_holds_naming_the_field(
    params: dict[str, object], says: str
) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(says)):
        bind(SQLITE, "SELECT :x", params)
    with pytest.raises(InvalidArgument, match=re.escape(says)):
        bind(POSTGRES, "SELECT :x", params)


def test_bind_lets_every_other_value_through() -> None:
    fine = {"a": "é ☃ \t\n", "b": 2**63 - 1, "c": -(2**63), "d": 1e308, "e": b"\x00", "f": None}

    assert bind(SQLITE, "SELECT :a, :b, :c, :d, :e, :f", fine)[1] == fine
