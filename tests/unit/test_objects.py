"""The object store: put/get, Refs as values, tiers, zero-copy reads and damaged copies."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore import codec, objects, retention, spill
from dreamlake.lakeshore.errors import InvalidArgument, NotFound
from dreamlake.lakeshore.objects import ObjectCorrupt, expiry
from dreamlake.lakeshore.objects.arena import Arena, arena_at
from dreamlake.lakeshore.storage import LocalStorage, StorageRef
from dreamlake.lakeshore.types import SubmitRequest


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

    assert len(wire) < 320  # two Refs
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
    assert arena_at(box / "tier-b").holds(ref.id)  # the next read is local


def test_a_host_only_object_is_not_found_elsewhere_with_the_reason(
    box: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = dls.put([1, 2, 3], durable=False)
    another_host(box, monkeypatch)

    with pytest.raises(NotFound, match="durable=False on host box-a"):
        dls.get(ref)


@pytest.mark.parametrize("damage", ["flip", "not-an-object"])
def test_a_damaged_arena_copy_is_an_error_never_a_wrong_array(box: Path, damage: str) -> None:
    ref = dls.put(np.arange(4096, dtype=np.float32), durable=False)
    arena = arena_at(box / "tier-a")
    where = arena.extent(ref.id)
    assert where is not None
    off, size = where
    with open(arena.path, "r+b") as f:
        if damage == "flip":
            f.seek(off + size - 5)
            f.write(bytes([f.read(1)[0] ^ 0xFF]))
        else:
            f.seek(off)
            f.write(b"garbage!")

    with pytest.raises(ObjectCorrupt, match=ref.id):
        dls.get(ref)


def test_a_truncated_file_copy_is_an_error(box: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKESHORE_OBJECTS", str(box / "tiny"))
    monkeypatch.setenv("LAKESHORE_OBJECTS_CAP", "4096")  # too small: objects go to files
    ref = dls.put(np.arange(4096, dtype=np.float32), durable=False)
    path = box / "home" / "objects" / "box-a" / ref.id
    path.write_bytes(path.read_bytes()[:-100])

    with pytest.raises(ObjectCorrupt, match="truncated"):
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
    assert not arena_at(box / "tier-b").holds(ref.id)
    assert not (box / "home" / "objects" / "box-b" / ref.id).exists()


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


# -- the arena: room, pins, eviction --------------------------------------------------------------


@pytest.fixture
def small_arena(box: Path, monkeypatch: pytest.MonkeyPatch) -> Arena:
    """A 1 MiB arena: four 256 KiB objects fill it."""
    monkeypatch.setenv("LAKESHORE_OBJECTS", str(box / "small"))
    monkeypatch.setenv("LAKESHORE_OBJECTS_CAP", str(1 << 20))
    return arena_at(box / "small")


def quarter_mib(seed: int) -> np.ndarray:
    return np.full(256 * 1024 // 8 - 16, seed, dtype=np.float64)  # leaves room for the header


def test_a_full_arena_drops_durable_objects_first_then_the_least_recently_used(
    small_arena: Arena,
) -> None:
    durable = dls.put(quarter_mib(1))
    host_only = [dls.put(quarter_mib(n), durable=False) for n in (2, 3, 4)]
    dls.get(host_only[0])  # 2 is now more recently used than 3

    dls.put(quarter_mib(5), durable=False)  # room for it: the durable one goes (a copy remains)
    assert not small_arena.holds(durable.id)
    assert float(dls.get(durable)[0]) == 1  # fetched back from storage, into the arena

    dls.put(quarter_mib(6), durable=False)  # the durable one is back and goes again
    dls.put(quarter_mib(7), durable=False)  # then the least recently used without a copy: 3
    assert not small_arena.holds(host_only[1].id)
    with pytest.raises(NotFound, match="evicted from this host's tier to make room"):
        dls.get(host_only[1])
    assert float(dls.get(host_only[0])[0]) == 2


def test_an_object_with_live_views_is_never_evicted(small_arena: Arena) -> None:
    first = dls.put(quarter_mib(7), durable=False)
    view = dls.get(first)

    for n in range(8):  # twice the arena's room
        dls.put(quarter_mib(n), durable=False)

    assert small_arena.holds(first.id)
    assert float(view[0]) == 7 and float(view[-1]) == 7  # the memory under it never changed


def test_a_view_released_makes_its_object_evictable_again(small_arena: Arena) -> None:
    first = dls.put(quarter_mib(7), durable=False)
    view = dls.get(first)[10:]  # a derived view holds the pin as well
    del view

    for n in range(8):
        dls.put(quarter_mib(n), durable=False)

    assert not small_arena.holds(first.id)


def test_an_object_too_big_for_the_arena_goes_to_a_file(small_arena: Arena, box: Path) -> None:
    big = np.arange(1 << 18, dtype=np.float64)  # 2 MiB, twice the arena

    ref = dls.put(big, durable=False)

    assert not small_arena.holds(ref.id)
    assert (box / "home" / "objects" / "box-a" / ref.id).exists()  # on disk, not in memory
    assert np.array_equal(dls.get(ref), big)


def test_an_extent_whose_writer_died_is_reclaimed(small_arena: Arena) -> None:
    import subprocess
    import sys

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    pid = int(dead.stdout)
    # What a writer killed mid-copy leaves: a reserved extent, never sealed, of a gone pid.
    small_arena._db.execute(
        "INSERT INTO extents VALUES ('00000000000000000000000000', 0, 1048576, 0, ?, 0)", (pid,)
    )

    ref = dls.put(quarter_mib(3), durable=False)

    assert small_arena.holds(ref.id)
    assert small_arena.extent("00000000000000000000000000") is None


def test_file_objects_unread_for_their_ttl_are_deleted(
    small_arena: Arena, box: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = dls.put(np.arange(1 << 18, dtype=np.float64), durable=False)  # too big: a file
    path = box / "home" / "objects" / "box-a" / old.id
    os.utime(path, (0, 0))  # unread since 1970
    monkeypatch.setenv("LAKESHORE_OBJECTS_TTL_S", "3600")

    new = dls.put(np.arange(1 << 18, dtype=np.float64), durable=False)

    assert not path.exists() and float(dls.get(new)[-1]) == (1 << 18) - 1
    with pytest.raises(NotFound):
        dls.get(old)


def test_putting_back_an_array_get_returned_moves_no_bytes() -> None:
    ref = dls.put(np.arange(100, dtype=np.int64), durable=False)
    got = dls.get(ref)

    assert dls.put(got, durable=False) == ref
    assert dls.put(got.copy(), durable=False).id != ref.id
    assert dls.put(got, durable=True).id != ref.id  # asked for more than it has: a new object


# -- transparent spills ---------------------------------------------------------------------------


@pytest.fixture
def spills(box: Path) -> Iterator[Path]:
    storage = box / "spills"
    spill.configure(inline_limit=1024, storage=f"file://{storage}")
    yield storage
    spill.configure()


def test_a_big_array_payload_and_result_ride_as_refs(d: dls.Dispatch, spills: Path) -> None:
    q = dls.SyncQueue("big", dispatch=d)
    a = np.arange(100_000, dtype=np.float32)

    inv = q.submit(dls.thunk(negated, a))
    dls.run_worker(q, once=True)

    row = d.store.invocation(d.namespace, inv)
    assert row.result is not None and len(row.result) < 1024
    out = q.result(inv, timeout=5)
    assert isinstance(out, np.ndarray) and np.array_equal(out, -a)
    # Durable by default: both objects were written through to storage.
    assert len(list((spills / "_objects").iterdir())) == 2


def test_result_with_ref_true_hands_back_the_ref(d: dls.Dispatch, spills: Path) -> None:
    q = dls.SyncQueue("big", dispatch=d)
    a = np.arange(100_000, dtype=np.float32)
    inv = q.submit(dls.thunk(negated, a))
    dls.run_worker(q, once=True)

    ref = q.result(inv, ref=True)

    assert isinstance(ref, dls.Ref) and not ref.spilled and ref.shape == (100_000,)
    assert np.array_equal(dls.get(ref), -a)
    # A small result has no object yet: asking for its Ref puts one.
    small = q.submit(dls.thunk(negated, np.arange(3, dtype=np.float32)))
    dls.run_worker(q, once=True)
    assert np.array_equal(dls.get(q.result(small, ref=True)), -np.arange(3, dtype=np.float32))


def test_a_job_handing_its_input_on_returns_the_same_object(d: dls.Dispatch, spills: Path) -> None:
    q = dls.SyncQueue("echo", dispatch=d)
    inv = q.submit(dls.thunk(same, np.arange(100_000, dtype=np.float32)))
    dls.run_worker(q, once=True)

    row = d.store.invocation(d.namespace, inv)
    assert row.result is not None
    result = codec.decode(row.result)
    assert isinstance(result, dls.Ref) and result.spilled
    # The worker returned the view it was given: the result is the argument's own object.
    assert len(list((spills / "_objects").iterdir())) == 1
    assert np.array_equal(q.result(inv), np.arange(100_000, dtype=np.float32))


def test_spills_can_stay_on_the_host(d: dls.Dispatch, spills: Path) -> None:
    spill.configure(inline_limit=1024, durable=False)
    q = dls.SyncQueue("fast", dispatch=d)
    a = np.arange(100_000, dtype=np.float32)

    out = q.submit(dls.thunk(negated, a))
    dls.run_worker(q, once=True)

    assert np.array_equal(q.result(out, timeout=5), -a)
    assert not (spills / "_objects").exists()


def test_a_big_frame_rides_as_a_ref_and_the_reader_gets_the_value(
    d: dls.Dispatch, spills: Path
) -> None:
    q = dls.SyncQueue("frames", dispatch=d)
    inv = q.submit(dls.thunk(frames_of, 3))
    dls.run_worker(q, once=True)

    got = list(q.stream(inv, timeout=5))

    assert [float(a[0]) for a in got] == [0.0, 1.0, 2.0]
    assert len(list((spills / "_objects").iterdir())) == 3
    trimmed = retention.trim(d, frames_older_than_s=0)
    assert trimmed.refs_deleted == 3 and not list((spills / "_objects").iterdir())


def frames_of(n: int) -> Iterator[np.ndarray]:
    for i in range(n):
        yield np.full(100_000, i, dtype=np.float32)


def negated(a: np.ndarray) -> np.ndarray:
    return -a


def same(a: np.ndarray) -> np.ndarray:
    return a


def doubled(ref: dls.Ref) -> dls.Ref:
    return dls.put(dls.get(ref) * 2, durable=False)


def rss_anon() -> int:
    for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/self/status")


# -- torch tensors --------------------------------------------------------------------------------


def torch_module() -> Any:
    return pytest.importorskip("torch")


def raw_bytes(t: Any) -> bytes:
    """A tensor's bytes as stored: bit-exact comparison, NaN payloads and bfloat16 included."""
    flat = t.contiguous().reshape(-1)
    return bytes(flat.view(torch_module().uint8).numpy()) if flat.numel() else b""


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int8", "bool", "complex64"])
def test_a_tensor_is_laid_out_raw_and_comes_back_bit_exact(dtype: str) -> None:
    torch = torch_module()
    t = (torch.randn(33, 7) * 100).to(getattr(torch, dtype))
    if t.is_floating_point():
        t[0, 0] = float("nan")

    ref = dls.put(t, durable=False)
    got = dls.get(ref)

    assert (ref.kind, ref.dtype, ref.shape) == ("tensor", dtype, (33, 7))
    assert ref.size == t.numel() * t.element_size()  # the raw buffer: no codec framing
    assert got.dtype == t.dtype and got.shape == t.shape
    assert raw_bytes(got) == raw_bytes(t)


def test_a_tensor_is_read_in_place_from_the_host_tier(box: Path) -> None:
    torch = torch_module()
    t = torch.arange(1 << 20, dtype=torch.bfloat16)
    ref = dls.put(t, durable=False)
    arena = arena_at(box / "tier-a")
    where = arena.extent(ref.id)
    assert where is not None

    got = dls.get(ref)

    base = np.frombuffer(arena.window(0, 1), dtype=np.uint8).ctypes.data
    off, size = where
    assert base + off <= got.data_ptr() < base + off + size  # a view of the arena, not a copy
    assert dls.put(got, durable=False) == ref  # handing it on moves no bytes


def test_tensors_odd_shapes_and_layouts_round_trip() -> None:
    torch = torch_module()
    cases = [
        torch.empty(0, 3),
        torch.tensor(3.5, dtype=torch.bfloat16),
        torch.arange(12.0).reshape(3, 4).T,  # not contiguous: one copy on put
        torch.tensor([1 + 2j], dtype=torch.complex64).conj(),  # a lazy conjugate, resolved
    ]
    for t in cases:
        got = dls.get(dls.put(t, durable=False))
        assert got.shape == t.shape and got.dtype == t.dtype
        assert torch.equal(got, t.resolve_conj())


def test_a_durable_tensor_is_fetched_on_another_host(
    box: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = torch_module()
    t = torch.randn(64, 64).to(torch.bfloat16)
    ref = dls.put(t, storage=f"file://{box / 'store'}")

    another_host(box, monkeypatch)
    got = dls.get(ref)

    assert raw_bytes(got) == raw_bytes(t)
    assert arena_at(box / "tier-b").holds(ref.id)


def test_a_big_tensor_argument_and_result_ride_raw(d: dls.Dispatch, spills: Path) -> None:
    torch = torch_module()
    q = dls.SyncQueue("tensors", dispatch=d)
    t = torch.randn(100_000).to(torch.bfloat16)

    inv = q.submit(dls.thunk(same, t))
    dls.run_worker(q, once=True)

    out = q.result(inv, timeout=5)
    assert isinstance(out, torch.Tensor) and raw_bytes(out) == raw_bytes(t)
    # One object: the argument was put raw, and the job handed the same tensor back.
    (obj,) = (spills / "_objects").iterdir()
    assert obj.stat().st_size < t.numel() * 2 + 4096


# -- expiry of objects put by hand ---------------------------------------------------------------


def test_a_hand_put_object_expires_and_a_spilled_one_does_not(
    box: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = f"file://{box / 'store'}"
    week = dls.put(np.arange(3), storage=store)
    short = dls.put(np.arange(3), storage=store, ttl_s=60)
    forever = dls.put(np.arange(3), storage=store, ttl_s=None)
    spilled = objects.put(np.arange(3), storage=store, spilled=True)

    assert week.expires is not None and week.expires - time.time() > 6.9 * 86400
    assert short.expires is not None and 59 < short.expires - time.time() <= 60
    assert forever.expires is None and spilled.expires is None
    monkeypatch.setenv("LAKESHORE_PUT_TTL_S", "5")
    soon = dls.put([1], durable=False)
    assert soon.expires is not None and soon.expires - time.time() <= 5


def test_an_expired_object_is_not_found_with_the_reason() -> None:
    ref = dls.put(np.arange(3), durable=False, ttl_s=60)
    expired = dataclasses.replace(ref, expires=time.time() - 1)

    with pytest.raises(NotFound, match=r"expired at .*ttl_s=None"):
        dls.get(expired)
    assert np.array_equal(dls.get(ref), np.arange(3))  # the same bytes, not yet expired


def test_an_object_with_an_expiry_is_fetched_on_another_host(
    box: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = dls.put(np.arange(5, dtype=np.int32), storage=f"file://{box / 'store'}", ttl_s=600)
    another_host(box, monkeypatch)

    assert np.array_equal(dls.get(ref), np.arange(5, dtype=np.int32))


def test_the_sweep_deletes_only_expired_durable_copies(box: Path) -> None:
    storage = LocalStorage(box / "store")
    url = storage.url
    old = dls.put([1], storage=url, ttl_s=10)
    young = dls.put([2], storage=url, ttl_s=1000)
    kept = dls.put([3], storage=url, ttl_s=None)
    spilled = objects.put([4], storage=url, spilled=True)
    storage.write("_objects/not-an-object", b"x")

    assert expiry.sweep(storage, now=time.time() + 100) == 1

    left = sorted(k.rpartition("/")[2] for k in storage.list("_objects/"))
    assert left == sorted([young.id, kept.id, spilled.id, "not-an-object"])
    assert old.id not in left


@pytest.mark.parametrize("ttl", [0, -5, "soon", True, float("nan"), 1e12])
def test_a_bad_time_to_live_is_refused_and_nothing_is_stored(box: Path, ttl: object) -> None:
    with pytest.raises(InvalidArgument, match=r"ttl_s is a number of seconds > 0"):
        dls.put([1], storage=f"file://{box / 'store'}", ttl_s=ttl)  # type: ignore[arg-type]
    assert not (box / "store").exists()


def test_retention_deletes_a_thunks_spilled_arguments_with_its_row(
    d: dls.Dispatch, spills: Path
) -> None:
    """A big argument is spilled inside a pickle the plane never opens: the submit lists it as
    the row's own object, and retention deletes it with the row (and the result with it)."""
    q = dls.SyncQueue("owned", dispatch=d)
    kept = dls.put(np.arange(100_000, dtype=np.float32), storage=f"file://{spills}")
    inv = q.submit(dls.thunk(negated, np.arange(100_000, dtype=np.float32)))
    dls.run_worker(q, once=True)
    assert q.status(inv).state == "succeeded"
    assert len(list((spills / "_objects").iterdir())) == 3  # argument, result, the kept put

    trimmed = retention.trim(d, invocations_older_than_s=0)

    assert (trimmed.invocations, trimmed.refs_deleted, trimmed.problems) == (1, 2, [])
    assert [p.name for p in (spills / "_objects").iterdir()] == [kept.id]


@pytest.mark.parametrize(
    ("objects", "message"),
    [
        ([StorageRef("file:///data", "models/weights.bin")], "keyed _objects/<object id>"),
        ([StorageRef("file:///data", "_objects/" + "0" * 26)] * 257, "at most 256 objects"),
    ],
    ids=["not-an-object-key", "too-many"],
)
def test_a_submit_may_list_only_durable_copies_of_its_objects(
    d: dls.Dispatch, objects: list[StorageRef], message: str
) -> None:
    """Retention deletes what a row lists: a producer cannot point it at any other key."""
    request = SubmitRequest(payload=codec.encode(1), objects=tuple(objects))

    with pytest.raises(InvalidArgument, match=message):
        d.store.submit(d.namespace, "owned", [request])
    assert d.store.count(d.namespace, "owned") == 0
