"""The object store: put/get, Refs as values, tiers, zero-copy reads and damaged copies."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore import codec
from dreamlake.lakeshore.errors import InvalidArgument, NotFound
from dreamlake.lakeshore.objects import ObjectCorrupt


@pytest.fixture(autouse=True)
def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A host of its own: its host tier and its storage under this test's directory."""
    monkeypatch.setenv("LAKESHORE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LAKESHORE_HOST_ID", "box-a")
    monkeypatch.setenv("LAKESHORE_OBJECTS", str(tmp_path / "tier-a"))
    monkeypatch.delenv("LAKESHORE_STORAGE", raising=False)
    return tmp_path


@pytest.fixture
def d() -> Iterator[dls.Dispatch]:
    with dls.Dispatch(":memory:") as plane:
        yield plane


def another_host(box: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKESHORE_HOST_ID", "box-b")
    monkeypatch.setenv("LAKESHORE_OBJECTS", str(box / "tier-b"))


@pytest.mark.parametrize(
    "value",
    [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.zeros((0, 5), dtype=np.int64),
        np.array(["2024-01-01"], dtype="datetime64[ns]"),
        np.asfortranarray(np.arange(6, dtype=np.int16).reshape(2, 3)),
        {"weights": [1.5, 2.5], "name": "run-7"},
        b"\x00raw bytes",
    ],
    ids=["f32", "empty", "datetime", "fortran", "dict", "bytes"],
)
def test_put_then_get_returns_the_value(value: object) -> None:
    ref = dls.put(value, durable=False)

    got = dls.get(ref)

    if isinstance(value, np.ndarray):
        assert got.dtype == value.dtype and got.shape == value.shape
        assert np.array_equal(got, value)
        assert (ref.kind, ref.dtype, ref.shape) == ("ndarray", value.dtype.str, value.shape)
    else:
        assert got == value and ref.kind == "value"


def test_an_array_comes_back_as_a_read_only_view_of_the_mapped_object() -> None:
    big = np.ones(16 * 1024 * 1024, dtype=np.float32)  # 64 MiB
    ref = dls.put(big, durable=False)
    anon_before = rss_anon()

    got = dls.get(ref)
    total = float(got.sum())

    assert total == big.size
    assert not got.flags.writeable
    # Reading it allocated no second copy: anonymous memory grew far less than 64 MiB.
    assert rss_anon() - anon_before < 16 * 1024 * 1024


def test_a_ref_is_a_small_value_that_rides_in_payloads_and_results() -> None:
    ref = dls.put(np.arange(1000, dtype=np.float64), durable=False)

    wire = codec.encode({"input": ref, "more": [ref]})

    assert len(wire) < 300
    assert codec.decode(wire) == {"input": ref, "more": [ref]}


def test_a_job_reads_the_ref_it_was_given_and_returns_one(d: dls.Dispatch) -> None:
    q = dls.SyncQueue("objects", dispatch=d)
    ref = dls.put(np.arange(10, dtype=np.float32), durable=False)
    inv = q.submit(dls.thunk(doubled, ref))

    assert dls.run_worker(q, once=True) == 1

    out = q.result(inv, timeout=5)
    assert isinstance(out, dls.Ref) and out.id != ref.id
    assert np.array_equal(dls.get(out), np.arange(10, dtype=np.float32) * 2)


def test_a_durable_object_is_read_on_another_host_and_cached_there(
    box: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = dls.put(np.arange(5, dtype=np.int32))
    assert ref.durable and ref.host == "box-a"

    another_host(box, monkeypatch)
    got = dls.get(ref)

    assert np.array_equal(got, np.arange(5, dtype=np.int32))
    assert (box / "tier-b" / ref.id).exists()  # the next read is local


def test_a_host_only_object_is_not_found_elsewhere_with_the_reason(
    box: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = dls.put([1, 2, 3], durable=False)
    another_host(box, monkeypatch)

    with pytest.raises(NotFound, match="durable=False on host box-a"):
        dls.get(ref)


@pytest.mark.parametrize("damage", ["flip", "truncate", "not-an-object"])
def test_a_damaged_copy_is_an_error_never_a_wrong_array(box: Path, damage: str) -> None:
    ref = dls.put(np.arange(4096, dtype=np.float32), durable=False)
    path = box / "tier-a" / ref.id
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[-5] ^= 0xFF
    elif damage == "truncate":
        del data[-100:]
    else:
        data[:8] = b"garbage!"
    path.write_bytes(bytes(data))

    with pytest.raises(ObjectCorrupt, match=ref.id):
        dls.get(ref)


def test_a_durable_copy_that_was_altered_is_refused_before_it_is_cached(
    box: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = dls.put(np.arange(64, dtype=np.uint8))
    durable = next((box / "home" / "storage" / "_objects").iterdir())
    data = bytearray(durable.read_bytes())
    data[-1] ^= 1
    durable.write_bytes(bytes(data))
    another_host(box, monkeypatch)

    with pytest.raises(ObjectCorrupt, match="hash"):
        dls.get(ref)
    assert not (box / "tier-b" / ref.id).exists()


def test_what_the_codec_cannot_carry_is_refused_by_put() -> None:
    with pytest.raises(InvalidArgument, match="cannot encode"):
        dls.put(object())
    with pytest.raises(InvalidArgument, match="object"):
        dls.put(np.array([object()], dtype=object))


def test_a_pickled_value_is_not_unpickled_by_get_unless_asked() -> None:
    ref = dls.put(dls.thunk(max, 1, 2), durable=False)

    with pytest.raises(dls.DecodeError, match="refusing to unpickle"):
        dls.get(ref)
    assert isinstance(dls.get(ref, allow_pickle=True), dls.Thunk)


@pytest.mark.parametrize(
    "fields",
    [
        {"id": "../../etc/passwd", "size": 1, "digest": "0" * 32},
        {"id": "0" * 26, "size": -1, "digest": "0" * 32},
        {"id": "0" * 26, "size": 1, "digest": "not hex"},
        {"id": "0" * 26, "size": 1, "digest": "0" * 32, "kind": "pickle"},
        {"id": "0" * 26, "size": 1, "digest": "0" * 32, "host": "a/b"},
    ],
)
def test_a_forged_ref_is_refused_when_decoded(fields: dict[str, object]) -> None:
    import msgpack

    wire = msgpack.packb(msgpack.ExtType(codec.EXT_OBJECT_REF, msgpack.packb(fields)))

    with pytest.raises(dls.DecodeError, match="ref"):
        codec.decode(wire)


def test_get_takes_only_a_ref() -> None:
    with pytest.raises(TypeError, match="takes a Ref"):
        dls.get("01m8s3rh4ngjsxpthvtvstn24a")  # type: ignore[arg-type]


def doubled(ref: dls.Ref) -> dls.Ref:
    return dls.put(dls.get(ref) * 2, durable=False)


def rss_anon() -> int:
    for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/self/status")
