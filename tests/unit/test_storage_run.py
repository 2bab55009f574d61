"""Issue 7: `dls.run` inside a job (id, attempt, post, read/write/open under `dls.scope`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.plane.store import settle as store_module
from dreamlake.lakeshore.run import NotInJob
from dreamlake.lakeshore.storage import LocalStorage


@pytest.fixture
def q() -> Iterator[dls.SyncQueue]:
    with dls.Dispatch(":memory:") as d:
        yield dls.SyncQueue("data", dispatch=d)


def write_scene(scene: str, frames: int) -> list[str]:
    """A data UDF: writes its outputs under a scope and returns the keys."""
    with dls.scope("renders"), dls.scope(scene):
        keys = [dls.run.write(f"frame-{i:03d}.bin", bytes([i]) * 10) for i in range(frames)]
        with dls.run.open("manifest.txt", "w") as manifest:
            manifest.write("\n".join(keys))
        dls.run.post({"attempt": dls.run.attempt, "id": dls.run.id})
        assert dls.run.read("frame-000.bin") == b"\x00" * 10  # reads are scoped too
    return keys


def test_a_data_udf_writes_under_scopes_and_returns_keys(q: dls.SyncQueue, tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)

    inv = q.submit(dls.thunk(write_scene, "scene7", 3))
    dls.run_worker(q, once=True, storage=storage)

    keys = q.result(inv)
    assert keys == [f"renders/scene7/frame-{i:03d}.bin" for i in range(3)]
    assert [dls.storage(storage.url).read(k) for k in keys] == [bytes([i]) * 10 for i in range(3)]
    assert storage.read("renders/scene7/manifest.txt").decode().splitlines() == keys
    assert list(q.stream(inv)) == [{"attempt": 1, "id": inv}]


def test_the_attempt_counts_retries(q: dls.SyncQueue, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "RETRY_BASE_S", 0.0)  # retry at once, no backoff
    inv = q.submit(dls.thunk(attempt_number), max_attempts=2)
    first = q.claim()
    assert first is not None
    q.nack(first, error="lost the node", retry=True)

    dls.run_worker(q, once=True)

    assert q.result(inv) == 2


def attempt_number() -> int:
    return int(dls.run.attempt)


async def async_body() -> str:
    await asyncio.sleep(0)
    with dls.scope("async"):
        return dls.run.write("out.txt", f"{dls.run.id}")


async def async_gen_body() -> AsyncIterator[int]:
    for _ in range(2):
        await asyncio.sleep(0)
        yield int(dls.run.attempt)


def test_async_bodies_see_the_job(q: dls.SyncQueue, tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    inv = q.submit(dls.thunk(async_body))
    gen = q.submit(dls.thunk(async_gen_body))

    dls.run_worker(q, burst=True, storage=storage)

    assert storage.read(q.result(inv)).decode() == inv
    assert list(q.stream(gen)) == [1, 1]


def test_scopes_nest_and_restore() -> None:
    with dls.scope("a"):
        with dls.scope("b/c"):
            assert dls.run.key("x") == "a/b/c/x"
            assert dls.run.key("/top") == "top"
        assert dls.run.key("x") == "a/x"
    assert dls.run.key("x") == "x"
    with pytest.raises(InvalidArgument), dls.scope(".."):
        pass


def test_outside_a_job_io_uses_the_default_storage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKESHORE_STORAGE", tmp_path.as_uri())

    assert dls.run.id is None and dls.run.attempt is None
    key = dls.run.write("notebook/out.txt", "hello")
    assert (tmp_path / "notebook" / "out.txt").read_text() == "hello"
    assert dls.run.read(key) == b"hello"
    with pytest.raises(NotInJob):
        dls.run.post(1)


def test_bodies_cannot_write_into_the_spill_area(tmp_path: Path) -> None:
    with dls.run.job("inv", post=print, storage=LocalStorage(tmp_path)):
        with pytest.raises(InvalidArgument, match="reserved"):
            dls.run.write("_spill/x", b"")
        with pytest.raises(InvalidArgument, match="bytes"):
            dls.run.write("x", 3)  # type: ignore[arg-type]


def storage_root() -> str:
    return dls.run.storage.url


def test_a_body_that_never_touches_storage_never_resolves_it(
    q: dls.SyncQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The storage is worked out on first use: a body that never asks for it runs even where
    the default cannot be opened, and one that does gets the error naming the URL."""
    monkeypatch.setenv("LAKESHORE_STORAGE", "ftp://nowhere/bucket")
    plain = q.submit(dls.thunk(lambda: 40 + 2))
    storing = q.submit(dls.thunk(storage_root))

    dls.run_worker(q, burst=True)

    assert q.result(plain) == 42
    with pytest.raises(dls.DispatchError, match="unknown storage URL 'ftp://nowhere/bucket'"):
        q.result(storing)
