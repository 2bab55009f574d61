"""The server's check of what a payload carries, on the bytes alone (server/payload_kinds.py).

It must agree with the codec: whatever it calls plain data, a worker decodes without
unpickling; whatever the codec would unpickle (or run as a command), it finds, however deep.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import uuid
from typing import Any

import msgpack
import pytest

from dreamlake.lakeshore import codec
from dreamlake.lakeshore.envelope import Envelope, thunk
from dreamlake.lakeshore.errors import DecodeError, InvalidArgument
from dreamlake.lakeshore.server.payload_kinds import MAX_EXT_NESTING, code_in

np = pytest.importorskip("numpy")


def _ext(code: int, value: Any) -> msgpack.ExtType:
    data = value if isinstance(value, bytes) else msgpack.packb(value, use_bin_type=True)
    return msgpack.ExtType(code, data)


PLAIN = {
    "none": None,
    "scalars": [1, -1, 2**63 - 1, 1.5, True, "Ça", b"\xc7\xd4 bytes that look like exts"],
    "containers": {"a": (1, (2, [3])), "b": {4, 5}, "c": frozenset({6})},
    "time and ids": [
        dt.datetime(2026, 1, 1, 12),
        dt.date(2026, 1, 1),
        dt.timedelta(3),
        uuid.uuid4(),
    ],
    "big int": -(2**100),
    "arrays": [np.arange(12, dtype=np.int16).reshape(3, 4), np.float32(2.5)],
    "raw envelope": Envelope(kind="raw", value={"rows": [(1, "a"), (2, "b")]}),
}


@pytest.mark.parametrize("name", PLAIN)
def test_plain_values_are_data(name: str) -> None:
    payload = codec.encode(PLAIN[name])
    assert code_in(payload) is None
    codec.decode(payload, allow_pickle=False)  # and the codec agrees


def _double(x: int) -> int:
    return 2 * x


CODE = {
    "a thunk": thunk(_double, 2),
    "a thunk in a dict in a list": [1, {"k": thunk(_double, 3)}],
    "a thunk in a tuple in a tuple": (1, (2, thunk(_double, 4))),
    "a thunk in a raw envelope": Envelope(kind="raw", value=[thunk(_double, 5)]),
    "a udf call": Envelope(kind="udf", name="double", fn=_double, args=(1,), kwargs={}),
    "a shell command": Envelope(kind="exec", command="echo hi"),
}


@pytest.mark.parametrize("name", CODE)
def test_code_is_found_wherever_it_is(name: str) -> None:
    found = code_in(codec.encode(CODE[name]))
    assert found is not None and any(w in found for w in ("thunk", "udf", "exec"))


def test_a_spilled_payload_is_code_and_a_ref_passed_on_purpose_is_data() -> None:
    spilled = _ext(49, {"id": "0" * 26, "size": 9, "digest": "0" * 32, "spilled": True})
    assert "spilled" in (code_in(msgpack.packb(spilled)) or "")
    old_spill = _ext(48, {"url": "file:///s", "key": "_spill/abc", "size": 9})
    assert "spilled" in (code_in(msgpack.packb(old_spill)) or "")
    dataset = _ext(48, {"url": "s3://bucket", "key": "datasets/x.parquet", "size": 9})
    assert code_in(msgpack.packb(dataset)) is None
    # a spilled ref inside a value is not resolved by the worker: it stays a Ref for the handler
    assert code_in(msgpack.packb([spilled])) is None


def test_hand_built_sets_and_frozensets_are_walked_too() -> None:
    # no Python set can hold a thunk (it is unhashable), but bytes can say anything
    for code in (2, 3):
        payload = msgpack.packb(_ext(code, [1, _ext(32, b"\x80\x05N.")]))
        assert code_in(payload) is not None


def test_an_envelope_naming_two_kinds_is_judged_by_every_one() -> None:
    pairs = [("kind", "raw"), ("kind", "thunk"), ("pickle", b"\x80\x05N.")]
    body = b"\x83" + b"".join(msgpack.packb(x, use_bin_type=True) for kv in pairs for x in kv)
    assert code_in(msgpack.packb(msgpack.ExtType(33, body))) is not None


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        (msgpack.packb(_ext(99, b"")), "ext type 99"),
        (msgpack.packb(_ext(33, {"kind": "shell"})), "unknown kind 'shell'"),
        (msgpack.packb(_ext(33, [1, 2])), "not a map with a 'kind'"),
        (msgpack.packb(_ext(33, {"kind": {"kind": "thunk"}})), "'kind' is not a string"),
        (msgpack.packb(_ext(33, {"kind": [1]})), "'kind' is not a string"),
        (msgpack.packb(_ext(33, b"\xc1")), "not msgpack"),
        (msgpack.packb({"a": 1}) + b"\xd4\x01", "not msgpack"),
        (b"\x91" * 2000 + msgpack.packb(_ext(1, [])), "more than 1024 containers"),
    ],
)
def test_what_cannot_be_read_is_refused_with_the_reason(payload: bytes, words: str) -> None:
    with pytest.raises(InvalidArgument, match=words):
        code_in(payload)


def test_nesting_is_bounded() -> None:
    value: Any = 1
    for _ in range(MAX_EXT_NESTING - 1):
        value = (value,)
    assert code_in(codec.encode(value)) is None
    with pytest.raises(InvalidArgument, match="nested too deeply"):
        code_in(codec.encode(((value,),)))


def _random_value(rng: random.Random, depth: int, plant: list[bool]) -> Any:
    """A random codec value; where `plant` is still [False], maybe a thunk (and it says so)."""
    if depth > 4 or rng.random() < 0.3:
        if not plant[0] and rng.random() < 0.2:
            plant[0] = True
            return thunk(_double, rng.randrange(9))
        return rng.choice([1, -7, 2.5, "s", b"\xd4", None, uuid.UUID(int=depth), 2**70])
    n = rng.randrange(4)
    kind = rng.choice(["list", "dict", "tuple", "raw"])
    items = [_random_value(rng, depth + 1, plant) for _ in range(n)]
    if kind == "dict":
        return {f"k{i}": v for i, v in enumerate(items)}
    if kind == "tuple":
        return tuple(items)
    if kind == "raw":
        return Envelope(kind="raw", value=items)
    return items


def test_the_check_agrees_with_the_codec_on_random_values() -> None:
    """Seeded (LAKESHORE_FAULT_SEED): a planted thunk is always found; without one, the codec
    decodes the payload refusing pickles, as a reader that does not trust the sender would."""
    seed = int(os.environ.get("LAKESHORE_FAULT_SEED") or random.randrange(2**32))
    rng = random.Random(seed)
    planted = 0
    for _ in range(500):
        plant = [False]
        payload = codec.encode(_random_value(rng, 0, plant))
        found = code_in(payload)
        if plant[0]:
            planted += 1
            assert found is not None, seed
            with pytest.raises(DecodeError, match="refusing to unpickle"):
                codec.decode(payload, allow_pickle=False)
        else:
            assert found is None, seed
            codec.decode(payload, allow_pickle=False)
    assert planted > 50, (seed, planted)
