"""Issue 7: storage behind one interface (a directory, S3 through moto's server), and spill.

Every behaviour runs on both kinds through the `store` fixture. S3 is moto's real HTTP server on
a loopback port (boto3 talks to it through AWS_ENDPOINT_URL, as it would to MinIO); moto is the
one fake allowed, for AWS only.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore import spill
from dreamlake.lakeshore.errors import InvalidArgument, NotFound
from dreamlake.lakeshore.storage import (
    LocalStorage,
    S3Storage,
    Storage,
    StorageRef,
    check_key,
    default_storage_url,
    open_storage,
    reset_storage_cache,
    sniff_ref,
)

BUCKET = "lakeshore-test"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    """moto's S3 server on a free loopback port, for this module."""
    pytest.importorskip("boto3")
    server_mod = pytest.importorskip("moto.server")
    port = _free_port()
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def aws(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The usual AWS environment pointed at moto, and a fresh bucket; yields the bucket URL."""
    import boto3

    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": moto_url,
    }.items():
        monkeypatch.setenv(name, value)
    reset_storage_cache()
    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET)
    yield f"s3://{BUCKET}/runs"
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        for obj in page.get("Contents", ()):
            client.delete_object(Bucket=BUCKET, Key=obj["Key"])
    client.delete_bucket(Bucket=BUCKET)
    reset_storage_cache()


@pytest.fixture(params=["file", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    if request.param == "file":
        return dls.storage((tmp_path / "storage").as_uri())
    return dls.storage(request.getfixturevalue("aws"))


# -- the interface ------------------------------------------------------------------------------


def test_write_then_read_round_trips_bytes(store: Storage) -> None:
    key = store.write("scene7/frame-000.bin", bytes(range(256)))

    assert key == "scene7/frame-000.bin"
    assert store.read(key) == bytes(range(256))
    assert store.exists(key) and not store.exists("scene7/other.bin")


def test_a_write_replaces_the_object(store: Storage) -> None:
    store.write("k", b"old")
    store.write("k", b"new")

    assert store.read("k") == b"new"


def test_reading_a_missing_key_is_not_found(store: Storage) -> None:
    with pytest.raises(NotFound, match="no object 'nope'"):
        store.read("nope")


def test_delete_is_idempotent(store: Storage) -> None:
    store.write("gone", b"x")

    store.delete("gone")
    store.delete("gone")

    assert not store.exists("gone")


def test_list_walks_a_prefix(store: Storage) -> None:
    for key in ("a/1", "a/2", "b/1"):
        store.write(key, b".")

    assert sorted(store.list("a/")) == ["a/1", "a/2"]
    assert sorted(store.list()) == ["a/1", "a/2", "b/1"]


def test_streams_in_binary_and_text(store: Storage) -> None:
    with store.open("log.txt", "w") as out:
        out.write("line 1\n")
        out.write("line 2\n")
    with store.open("blob", "wb") as out:
        for _ in range(3):
            out.write(b"x" * 100_000)

    with store.open("log.txt", "r") as text:
        assert text.read().splitlines() == ["line 1", "line 2"]
    with store.open("blob", "rb") as raw:
        assert len(raw.read()) == 300_000


def test_a_write_stream_left_by_an_exception_leaves_the_old_object(store: Storage) -> None:
    store.write("out.bin", b"complete")

    with pytest.raises(RuntimeError), store.open("out.bin", "wb") as out:
        out.write(b"half")
        raise RuntimeError("body failed midway")

    assert store.read("out.bin") == b"complete"


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/../b", "./a", "a\\b", "a/"])
def test_keys_that_could_escape_or_mean_two_things_are_refused(key: str) -> None:
    with pytest.raises(InvalidArgument):
        check_key(key)


def test_a_local_write_is_atomic_for_a_concurrent_reader(tmp_path: Path) -> None:
    """Readers see only whole objects while a writer keeps replacing one (temp + rename)."""
    store = LocalStorage(tmp_path)
    versions = [bytes([i]) * 200_000 for i in range(8)]
    store.write("hot", versions[0])
    done = threading.Event()
    torn: list[int] = []

    def reader() -> None:
        while not done.is_set():
            data = store.read("hot")
            if data not in versions:
                torn.append(len(data))

    thread = threading.Thread(target=reader)
    thread.start()
    for _ in range(20):
        for version in versions:
            store.write("hot", version)
    done.set()
    thread.join()

    assert torn == []
    assert [p.name for p in tmp_path.iterdir()] == ["hot"]  # no temp file left behind


def test_open_by_url(tmp_path: Path) -> None:
    assert isinstance(open_storage(tmp_path.as_uri()), LocalStorage)
    assert isinstance(open_storage(str(tmp_path)), LocalStorage)
    s3 = open_storage("s3://bucket/a/b/")
    assert isinstance(s3, S3Storage) and (s3.bucket, s3.prefix) == ("bucket", "a/b")
    with pytest.raises(InvalidArgument, match="unknown storage URL"):
        open_storage("ftp://host/x")


def test_the_default_storage_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LAKESHORE_STORAGE", raising=False)
    monkeypatch.setenv("LAKESHORE_HOME", str(tmp_path))
    assert default_storage_url() == (tmp_path / "storage").as_uri()

    monkeypatch.setenv("LAKESHORE_STORAGE", "s3://bucket/prefix")
    assert default_storage_url() == "s3://bucket/prefix"


# -- refs on the wire ---------------------------------------------------------------------------


def test_a_storage_ref_is_a_codec_ext_type() -> None:
    ref = StorageRef("s3://bucket/p", "scene7/out.png", 42)

    assert dls.decode(dls.encode(ref)) == ref
    assert dls.decode(dls.encode({"refs": [ref]})) == {"refs": [ref]}
    assert dls.codec.EXT_TYPES["storage_ref"] == 48


def test_sniff_finds_a_ref_only_in_bytes_that_are_exactly_one_ref() -> None:
    ref = StorageRef("file:///tmp/x", "_spill/abc", 7)

    assert sniff_ref(dls.encode(ref)) == ref
    assert sniff_ref(dls.encode([ref])) is None
    assert sniff_ref(dls.encode({"key": "_spill/abc"})) is None
    assert sniff_ref(dls.encode(b"\xc7" * 40)) is None
    assert sniff_ref(b"\xc7\x05\x30garbage") is None
    assert sniff_ref(None) is None


# -- spill --------------------------------------------------------------------------------------


@pytest.fixture
def plane() -> Iterator[dls.Dispatch]:
    with dls.Dispatch(":memory:") as d:
        yield d


@pytest.fixture
def small_limit() -> Iterator[None]:
    """A 1 KiB inline limit, so spills need no big test values."""
    spill.configure(inline_limit=1024)
    yield
    spill.configure()


def test_a_big_payload_and_result_round_trip_through_storage(
    store: Storage, plane: dls.Dispatch, small_limit: None
) -> None:
    spill.configure(inline_limit=1024, storage=store)
    q = dls.SyncQueue("spill", dispatch=plane)
    big = {"blob": os.urandom(50_000), "n": 3}

    inv = q.submit(dls.thunk(_echo_twice, big))
    dls.run_worker(q, once=True, storage=store)

    # the plane holds two small Refs (a few hundred bytes), not the bytes
    claim_row = plane.store.invocation(plane.namespace, inv)
    assert claim_row.result is not None and len(claim_row.result) < 512
    assert sniff_ref(claim_row.result) is not None
    assert q.result(inv) == {"blob": big["blob"] * 2, "n": 3}
    assert len(list(store.list("_objects/"))) == 2


def _echo_twice(value: dict[str, object]) -> dict[str, object]:
    return {"blob": value["blob"] * 2, "n": value["n"]}  # type: ignore[operator]


def test_values_under_the_limit_stay_inline(tmp_path: Path, plane: dls.Dispatch) -> None:
    store = LocalStorage(tmp_path)
    data = spill.dumps({"x": 1}, storage=store)

    assert dls.decode(data) == {"x": 1}
    assert list(store.list()) == []


def test_the_limit_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKESHORE_INLINE_LIMIT", "10")
    assert spill.inline_limit() == 10
    monkeypatch.setenv("LAKESHORE_INLINE_LIMIT", "lots")
    with pytest.raises(InvalidArgument, match="LAKESHORE_INLINE_LIMIT"):
        spill.inline_limit()
    monkeypatch.delenv("LAKESHORE_INLINE_LIMIT")
    assert spill.inline_limit() == spill.DEFAULT_INLINE_LIMIT == 256 * 1024


def test_a_custom_worker_claims_and_acks_spilled_values(
    tmp_path: Path, plane: dls.Dispatch, small_limit: None
) -> None:
    spill.configure(inline_limit=1024, storage=LocalStorage(tmp_path))
    q = dls.SyncQueue("custom", dispatch=plane)
    inv = q.submit({"data": b"p" * 5000})

    job = q.claim()
    assert job is not None and job.payload == {"data": b"p" * 5000}
    q.ack(job, [b"r" * 5000])

    assert q.result(inv) == [b"r" * 5000]


def test_a_ref_user_code_passes_is_a_value_not_a_spill(tmp_path: Path, plane: dls.Dispatch) -> None:
    """Only spilled refs are resolved: a dataset ref stays a ref."""
    dataset = LocalStorage(tmp_path).ref("datasets/train.bin", 10)
    q = dls.SyncQueue("refs", dispatch=plane)

    inv = q.submit(dls.thunk(_identity, dataset))
    dls.run_worker(q, once=True)

    assert q.result(inv) == dataset


def _identity(value: object) -> object:
    return value
