"""Token expiry and orgs in the store (store/auth.py), on both dialects: what the admin routes
and the CLI read."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `tests.support` is importable however pytest was started
    sys.path.insert(0, str(ROOT))

from dreamlake.lakeshore.errors import InvalidArgument, Unauthorized  # noqa: E402
from dreamlake.lakeshore.plane.auth import TokenScope  # noqa: E402
from dreamlake.lakeshore.plane.dispatch import open_store  # noqa: E402
from dreamlake.lakeshore.plane.store import SqlStore  # noqa: E402
from tests.support.postgres import postgres_schema  # noqa: E402


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest) -> Iterator[SqlStore]:
    """Both dialects: migration 17 adds `expires_at` to each (Postgres skips when unreachable)."""
    if request.param == "sqlite":
        sql = open_store(":memory:")
        yield sql
        sql.close()
        return
    with postgres_schema("lakeshore_expiry") as url:
        sql = open_store(url)
        yield sql
        sql.close()


def test_a_token_without_expiry_never_expires(store: SqlStore) -> None:
    token = store.create_token("team")
    assert store.token_scope(token).expires_at is None
    (row,) = store.list_tokens()
    assert row["expires_at"] is None


def test_an_expiring_token_works_until_its_time_then_is_401(store: SqlStore) -> None:
    before = time.time()
    token = store.create_token("team", expires_in_s=3600)
    scope = store.token_scope(token)
    assert scope.expires_at is not None and before + 3600 <= scope.expires_at <= time.time() + 3600
    scope.check_live(scope.expires_at - 1)  # still live a second before
    with pytest.raises(Unauthorized, match=r"^this token expired at \d{4}-\d\d-\d\dT"):
        scope.check_live(scope.expires_at)
    assert store.describe_token(token)["expires_at"] == scope.expires_at


def test_the_store_refuses_an_expired_token(store: SqlStore) -> None:
    token = store.create_token("team", expires_in_s=1e-6)
    with pytest.raises(Unauthorized, match="ask an admin for a new one"):
        store.token_scope(token)
    assert store.describe_token(token)["namespace"] == "team"  # the row stays, for ls / revoke


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, 1e12, True, "30d"])
def test_a_lifetime_out_of_range_is_refused(store: SqlStore, bad: object) -> None:
    with pytest.raises(InvalidArgument, match="expires_in_s must be a number of seconds"):
        store.create_token("team", expires_in_s=bad)  # type: ignore[arg-type]
    assert store.list_tokens() == []


def test_orgs_are_the_namespaces_that_name_them(store: SqlStore) -> None:
    store.add_namespace("a", "acme")
    store.add_namespace("b", "acme")
    store.add_namespace("c", "zeta")
    store.add_namespace("solo")
    assert store.list_orgs() == [
        {"name": "acme", "namespaces": ["a", "b"]},
        {"name": "zeta", "namespaces": ["c"]},
    ]


def test_a_scope_made_by_hand_never_expires() -> None:
    TokenScope("ns", None, "").check_live(time.time() + 1e9)
