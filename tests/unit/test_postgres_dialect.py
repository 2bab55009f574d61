"""The Postgres connector's pure parts: URLs, channel names, the Postgres-only SQL (no server)."""

from __future__ import annotations

import pytest

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.plane.queries import (
    POSTGRES,
    SQLITE,
    bind,
    engine_queries,
    migrations,
    split_statements,
)

pytest.importorskip("psycopg")
from psycopg.conninfo import conninfo_to_dict

from dreamlake.lakeshore.plane.postgres import channel_name, parse_url, url_pool_size


def test_schema_in_the_url_becomes_a_search_path_and_leaves_the_conninfo() -> None:
    conninfo, schema = parse_url("postgresql://u@db.example:5433/app?schema=plane_a")

    assert schema == "plane_a"
    assert "schema=" not in conninfo  # libpq would refuse an unknown parameter
    assert "search_path=plane_a" in conninfo
    assert "host=db.example" in conninfo and "port=5433" in conninfo and "dbname=app" in conninfo


def test_url_options_are_kept_beside_the_search_path() -> None:
    conninfo, _ = parse_url(
        "postgresql://h/db?options=-c%20statement_timeout%3D5000&schema=s1&sslmode=disable"
    )

    params = conninfo_to_dict(conninfo)
    assert params["options"] == "-c statement_timeout=5000 -c search_path=s1"
    assert params["sslmode"] == "disable"


def test_pool_size_in_the_url_is_ours_and_never_reaches_libpq() -> None:
    url = "postgresql://h/db?pool_size=32&schema=s1"

    assert url_pool_size(url) == 32
    assert "pool_size" not in parse_url(url)[0]
    assert url_pool_size("postgresql://h/db") is None
    with pytest.raises(InvalidArgument):
        url_pool_size("postgresql://h/db?pool_size=0")


def test_an_explicit_schema_wins_over_the_url() -> None:
    _, schema = parse_url("postgresql://h/db?schema=from_url", "explicit")

    assert schema == "explicit"


def test_without_a_schema_the_server_default_search_path_applies() -> None:
    conninfo, schema = parse_url("postgresql://h/db")

    assert schema is None
    assert "search_path" not in conninfo


@pytest.mark.parametrize("bad", ["Upper", "has-dash", "1starts_with_digit", "x" * 64, "a;b"])
def test_schema_names_that_would_need_quoting_are_refused(bad: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_url(f"postgresql://h/db?schema={bad}")


def test_channel_names_fit_postgres_identifiers() -> None:
    assert channel_name("plane_a") == "lakeshore_plane_a"
    long = channel_name("s" * 63)
    assert len(long) <= 63
    assert long != channel_name("s" * 62 + "t")


def test_storage_tuning_runs_on_postgres_and_is_a_comment_on_sqlite() -> None:
    pg = {v: split_statements(sql) for v, sql in migrations(POSTGRES)}
    lite = {v: split_statements(sql) for v, sql in migrations(SQLITE)}
    tuning = next(v for v, stmts in pg.items() if any("fillfactor" in s for s in stmts))

    assert lite[tuning] == []
    assert any(s.startswith("ALTER TABLE invocations SET (fillfactor") for s in pg[tuning])


def test_postgres_only_statements_bind_to_psycopg_parameters() -> None:
    sql, params = bind(POSTGRES, engine_queries(POSTGRES)["lock_channel"], {"channel": "c"})

    assert "%(channel)s" in sql
    assert params == {"channel": "c"}


def test_claims_skip_locked_rows_on_postgres_only() -> None:
    from dreamlake.lakeshore.plane.queries import queries

    assert "FOR UPDATE SKIP LOCKED" in queries(POSTGRES)["claim_fifo"]
    assert "FOR UPDATE" not in queries(SQLITE)["claim_fifo"]
