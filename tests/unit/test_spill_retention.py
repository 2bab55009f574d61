"""Issue 7: the store's retention pass (every namespace, batches, ages) on the memory plane."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore import spill
from dreamlake.lakeshore.errors import InvalidArgument, NotFound
from dreamlake.lakeshore.plane.store import SqlStore
from dreamlake.lakeshore.storage import LocalStorage

DAY = 86400.0


@pytest.fixture
def store() -> Iterator[SqlStore]:
    with dls.Dispatch(":memory:") as d:
        yield d.store


def _ended(store: SqlStore, ns: str, n: int, payload: object = 1) -> list[str]:
    plane = dls.Dispatch(store, namespace=ns)
    q = dls.SyncQueue("q", dispatch=plane)
    ids = [q.submit(payload) for _ in range(n)]
    for inv in ids:
        plane.cancel(inv)
    return ids


def test_a_server_pass_trims_every_namespace(store: SqlStore) -> None:
    a = _ended(store, "team-a", 2)
    b = _ended(store, "team-b", 3)

    trimmed = store.trim_retention(invocations_older_than_s=0, now=time.time() + 1)

    assert trimmed.invocations == 5
    for ns, ids in (("team-a", a), ("team-b", b)):
        for inv in ids:
            with pytest.raises(NotFound):
                store.invocation(ns, inv)


def test_one_namespace_leaves_the_others(store: SqlStore) -> None:
    _ended(store, "team-a", 2)
    kept = _ended(store, "team-b", 1)

    trimmed = store.trim_retention(invocations_older_than_s=0, ns="team-a", now=time.time() + 1)

    assert trimmed.invocations == 2
    assert store.invocation("team-b", kept[0]).state == "cancelled"


def test_batches_cover_everything(store: SqlStore) -> None:
    _ended(store, "default", 7)

    trimmed = store.trim_retention(invocations_older_than_s=0, now=time.time() + 1, batch=2)

    assert trimmed.invocations == 7


def test_ages_count_from_the_end_of_the_invocation(store: SqlStore) -> None:
    _ended(store, "default", 1)
    now = time.time()

    assert store.trim_retention(invocations_older_than_s=DAY, now=now + DAY - 60).invocations == 0
    assert store.trim_retention(invocations_older_than_s=DAY, now=now + DAY + 60).invocations == 1


def test_spilled_refs_come_back_for_deletion(store: SqlStore, tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    spill.configure(inline_limit=16, storage=storage)
    try:
        _ended(store, "default", 2, payload=b"x" * 100)
    finally:
        spill.configure()

    trimmed = store.trim_retention(invocations_older_than_s=0, now=time.time() + 1)

    assert sorted(r.key for r in trimmed.refs) == sorted(storage.list("_objects/"))
    assert spill.delete_refs(trimmed.refs) == []
    assert list(storage.list()) == []


def test_bad_ages_are_refused(store: SqlStore) -> None:
    with pytest.raises(InvalidArgument):
        store.trim_retention(frames_older_than_s=-1)
    with pytest.raises(InvalidArgument):
        store.trim_retention(invocations_older_than_s="7d")  # type: ignore[arg-type]
