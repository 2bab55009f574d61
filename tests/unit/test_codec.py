"""The payload codec: what goes in comes out as the same type, and bad bytes fail as DecodeError."""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import enum
import random
import struct
import subprocess
import sys
import threading
import uuid
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

import msgpack
import pytest

from dreamlake.lakeshore.codec import (
    CODEC_VERSION,
    EXT_TYPES,
    PICKLE_PROTOCOL,
    decode,
    encode,
)
from dreamlake.lakeshore.envelope import Envelope, Thunk, thunk
from dreamlake.lakeshore.errors import DecodeError, InvalidArgument

np = pytest.importorskip("numpy")  # a dev dependency; torch and Pillow are skipped per test


def roundtrip(value: Any) -> Any:
    return decode(encode(value))


def ext_frame(code: int, payload: bytes) -> bytes:
    return msgpack.packb(msgpack.ExtType(code, payload))


def blob(header: Any, raw: bytes, *, header_len: int | None = None) -> bytes:
    head = msgpack.packb(header, use_bin_type=True)
    size = len(head) if header_len is None else header_len
    pad = -(4 + len(head)) % 16
    return struct.pack("<I", size) + head + b"\0" * pad + raw


# -- plain values ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -1,
        2**63,
        2**64 - 1,
        -(2**63),
        1.5,
        float("inf"),
        "",
        "héllo ✓",
        b"\x00\xff",
        [],
        {},
        {"a": [1, {"b": None}], "c": b"x"},
        {1: "int key", 2.5: "float key"},
    ],
)
def test_native_values_round_trip_unchanged(value: Any) -> None:
    # given a wire-native value / when it is encoded and decoded
    out = roundtrip(value)
    # then it is equal and of the same type
    assert out == value
    assert type(out) is type(value)


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1, 10**40, -(10**40), 2**1000 + 1])
def test_ints_beyond_64_bits_round_trip(value: int) -> None:
    # given an int msgpack cannot hold in 64 bits / when round-tripped / then it is exact
    assert roundtrip(value) == value


def test_bytearray_and_memoryview_decode_as_bytes() -> None:
    # given byte buffers / when round-tripped / then they come back as bytes with the same content
    assert roundtrip([bytearray(b"ab"), memoryview(b"cd")]) == [b"ab", b"cd"]


def test_decode_accepts_memoryview_and_bytearray_input() -> None:
    # given an encoded frame wrapped in a memoryview and a bytearray
    data = encode({"k": (1, 2)})
    # when decoded / then both give the original value
    assert decode(memoryview(data)) == {"k": (1, 2)}
    assert decode(bytearray(data)) == {"k": (1, 2)}


# -- tuples and containers -------------------------------------------------------------------------


def test_top_level_tuple_stays_a_tuple() -> None:
    # given a tuple / when round-tripped / then it is a tuple, not a list
    out = roundtrip((1, "a", None))
    assert out == (1, "a", None)
    assert type(out) is tuple


def test_nested_tuples_inside_dicts_inside_lists_stay_tuples() -> None:
    # given tuples nested in dicts in lists in tuples
    value = [{"k": (1, (2, [3, (4,)])), "e": ()}, ({"x": (5, 6)},)]
    # when round-tripped
    out = roundtrip(value)
    # then every level keeps its container type
    assert out == value
    assert type(out) is list
    assert type(out[0]["k"]) is tuple
    assert type(out[0]["k"][1]) is tuple
    assert type(out[0]["k"][1][1]) is list
    assert type(out[0]["k"][1][1][1]) is tuple
    assert out[0]["e"] == () and type(out[0]["e"]) is tuple
    assert type(out[1]) is tuple and type(out[1][0]["x"]) is tuple


def test_tuple_dict_keys_round_trip() -> None:
    # given a dict keyed by tuples / when round-tripped / then the keys are tuples again
    value = {(1, 2): "a", ("x", (3,)): "b"}
    assert roundtrip(value) == value


def test_set_and_frozenset_round_trip_with_their_types() -> None:
    # given a set and a frozenset holding tuples
    value = {"s": {1, 2, (3, 4)}, "f": frozenset({"a", (5,)})}
    # when round-tripped
    out = roundtrip(value)
    # then types and members are kept
    assert out == value
    assert type(out["s"]) is set
    assert type(out["f"]) is frozenset


class Point(NamedTuple):
    x: int
    y: int


class Level(enum.IntEnum):
    HIGH = 3


class Color(str, enum.Enum):
    RED = "red"


def test_subclasses_of_native_types_travel_as_their_base_type() -> None:
    # given a namedtuple, an IntEnum, a str-mixin Enum and an OrderedDict
    value = [Point(1, 2), Level.HIGH, Color.RED, collections.OrderedDict(a=1)]
    # when round-tripped
    out = roundtrip(value)
    # then each comes back as the plain base type with the same value
    assert out == [(1, 2), 3, "red", {"a": 1}]
    assert [type(v) for v in out] == [tuple, int, str, dict]


# -- datetimes, uuid -------------------------------------------------------------------------------


def test_naive_datetime_stays_naive_with_microseconds() -> None:
    # given a naive datetime / when round-tripped / then it is equal and still naive
    value = dt.datetime(2021, 5, 6, 7, 8, 9, 123456)
    out = roundtrip(value)
    assert out == value
    assert out.tzinfo is None


@pytest.mark.parametrize(
    "tz",
    [dt.timezone.utc, dt.timezone(dt.timedelta(hours=-3, minutes=-30)), ZoneInfo("Europe/Paris")],
)
def test_aware_datetime_keeps_instant_wall_time_and_offset(tz: dt.tzinfo) -> None:
    # given an aware datetime
    value = dt.datetime(2024, 7, 1, 12, 30, 15, 42, tzinfo=tz)
    # when round-tripped
    out = roundtrip(value)
    # then the instant, the wall time and the offset all survive
    assert out == value
    assert out.replace(tzinfo=None) == value.replace(tzinfo=None)
    assert out.utcoffset() == value.utcoffset()


def test_zoneinfo_comes_back_as_the_same_zone_including_fold() -> None:
    # given the second 01:30 of the New York DST fall-back (fold=1)
    zone = ZoneInfo("America/New_York")
    value = dt.datetime(2024, 11, 3, 1, 30, fold=1, tzinfo=zone)
    # when round-tripped
    out = roundtrip(value)
    # then it is still in that zone, on the same wall time, with the later offset
    assert out.tzinfo == zone
    assert (out.hour, out.minute, out.fold) == (1, 30, 1)
    assert out.utcoffset() == dt.timedelta(hours=-5)


def test_date_and_timedelta_round_trip() -> None:
    # given a date and a negative timedelta with microseconds
    value = (dt.date(1999, 12, 31), dt.timedelta(days=-3, seconds=5, microseconds=7))
    # when round-tripped / then both are equal and keep their types
    out = roundtrip(value)
    assert out == value
    assert type(out[0]) is dt.date
    assert type(out[1]) is dt.timedelta


def test_msgpack_timestamp_from_another_writer_decodes_as_aware_utc() -> None:
    # given a frame holding msgpack's own timestamp ext, as other languages write it
    data = msgpack.packb(msgpack.Timestamp(seconds=1_700_000_000, nanoseconds=5000))
    # when decoded / then it is an aware UTC datetime at that instant
    out = decode(data)
    assert out == dt.datetime(2023, 11, 14, 22, 13, 20, 5, tzinfo=dt.timezone.utc)


def test_uuid_round_trips() -> None:
    # given a UUID / when round-tripped / then it is the same UUID
    value = uuid.uuid4()
    out = roundtrip({"id": value})
    assert out["id"] == value
    assert type(out["id"]) is uuid.UUID


# -- numpy -----------------------------------------------------------------------------------------

NUMPY_DTYPES = [
    "bool",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    ">i4",
    ">f8",
    "M8[ns]",
    "M8[D]",
    "m8[s]",
    "U3",
    "S4",
]


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_ndarray_round_trips_for_dtype(dtype: str) -> None:
    # given a 2-d array of that dtype with non-trivial content
    arr = np.arange(12).reshape(3, 4).astype(dtype)
    # when round-tripped
    out = roundtrip(arr)
    # then dtype, shape and every element are equal
    assert out.dtype == arr.dtype
    assert out.shape == arr.shape
    assert np.array_equal(out, arr)


def test_ndarray_nan_and_structured_dtype_round_trip() -> None:
    # given a float array with nan and a structured array with a nested field and a subarray
    floats = np.array([1.0, np.nan, -np.inf])
    rec_dtype = np.dtype([("a", "<i4"), ("b", "<f8", (2,)), ("c", [("x", "u1"), ("y", "S3")])])
    recs = np.array([(1, (2.0, 3.0), (4, b"abc")), (5, (6.0, 7.0), (8, b"d"))], dtype=rec_dtype)
    # when round-tripped
    out_floats, out_recs = roundtrip((floats, recs))
    # then values, field names and layout survive
    assert np.array_equal(out_floats, floats, equal_nan=True)
    assert out_recs.dtype == rec_dtype
    assert out_recs.tobytes() == recs.tobytes()
    assert np.array_equal(out_recs["b"], recs["b"])
    assert out_recs["c"]["y"].tolist() == [b"abc", b"d"]


def test_non_contiguous_slice_round_trips_by_value() -> None:
    # given a strided view a[::2, 1:]
    base = np.arange(30, dtype=np.int32).reshape(5, 6)
    view = base[::2, 1:]
    assert not view.flags.c_contiguous
    # when round-tripped / then the values are those of the view
    out = roundtrip(view)
    assert out.shape == (3, 5)
    assert np.array_equal(out, view)


def test_fortran_order_array_comes_back_fortran_ordered() -> None:
    # given a Fortran-ordered array
    arr = np.asfortranarray(np.arange(24, dtype=np.float64).reshape(2, 3, 4))
    # when round-tripped
    out = roundtrip(arr)
    # then values match and the layout is still Fortran
    assert np.array_equal(out, arr)
    assert out.flags.f_contiguous
    assert not out.flags.c_contiguous


@pytest.mark.parametrize(
    "arr",
    [np.array(7.5), np.zeros((0, 3), dtype=np.float32), np.zeros((2, 0, 4), dtype=np.int8)],
    ids=["0-d", "empty-2d", "empty-3d"],
)
def test_zero_d_and_empty_arrays_round_trip(arr: Any) -> None:
    # given a 0-d or an empty array / when round-tripped / then shape, dtype and value survive
    out = roundtrip(arr)
    assert isinstance(out, np.ndarray)
    assert out.shape == arr.shape
    assert out.dtype == arr.dtype
    assert np.array_equal(out, arr)


def test_decoded_array_is_an_aligned_read_only_view_over_the_frame() -> None:
    # given a decoded float64 array
    out = roundtrip(np.arange(1000, dtype=np.float64))
    # when its memory is inspected
    owner = out
    while isinstance(owner, np.ndarray):
        owner = owner.base
    # then it is a view over the ext payload bytes (no copy), aligned, and read-only
    assert isinstance(owner, bytes)
    assert out.flags.aligned
    assert not out.flags.writeable
    assert out.sum() == sum(range(1000))


@pytest.mark.parametrize(
    "scalar",
    [np.float32(1), np.float64(2.5), np.int64(-3), np.uint8(200), np.bool_(True)],
    ids=repr,
)
def test_numpy_scalars_come_back_as_numpy_scalars(scalar: Any) -> None:
    # given a numpy scalar / when round-tripped
    out = roundtrip(scalar)
    # then it is the same numpy type and value, not a Python number or a 0-d array
    assert type(out) is type(scalar)
    assert out == scalar


def test_numpy_datetime64_scalar_round_trips() -> None:
    # given a numpy datetime64 scalar / when round-tripped / then unit and value are kept
    value = np.datetime64("2024-01-02T03:04:05.123456789", "ns")
    out = roundtrip(value)
    assert type(out) is np.datetime64
    assert out == value
    assert out.dtype == value.dtype


def test_arrays_nested_in_tuples_in_dicts_round_trip() -> None:
    # given arrays inside tuples inside a dict
    value = {"batch": (np.ones((2, 2), np.float32), np.arange(3)), "n": 2}
    # when round-tripped
    out = roundtrip(value)
    # then structure and arrays survive
    assert type(out["batch"]) is tuple
    assert np.array_equal(out["batch"][0], value["batch"][0])
    assert np.array_equal(out["batch"][1], value["batch"][1])


def test_object_dtype_array_is_refused_naming_the_dtype() -> None:
    # given an object array / when encoded / then InvalidArgument names the object dtype
    with pytest.raises(InvalidArgument, match="object"):
        encode({"x": np.array([{"a": 1}, None], dtype=object)})


def test_masked_array_is_refused_rather_than_losing_its_mask() -> None:
    # given a masked array / when encoded / then it is refused with a hint
    with pytest.raises(InvalidArgument, match="masked"):
        encode(np.ma.masked_array([1, 2], mask=[0, 1]))


# -- torch -----------------------------------------------------------------------------------------


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch")


@pytest.mark.parametrize(
    "dtype_name", ["float32", "float64", "float16", "int64", "int8", "uint8", "bool", "complex64"]
)
def test_tensor_round_trips_dtype_shape_and_values(torch: Any, dtype_name: str) -> None:
    # given a tensor of that dtype
    t = (torch.arange(24).reshape(2, 3, 4) % 7).to(getattr(torch, dtype_name))
    # when round-tripped
    out = roundtrip(t)
    # then it is a tensor with the same dtype, shape and values
    assert isinstance(out, torch.Tensor)
    assert out.dtype == t.dtype
    assert out.shape == t.shape
    assert torch.equal(out, t)


def test_bfloat16_tensor_round_trips_bit_exact(torch: Any) -> None:
    # given a bfloat16 tensor with awkward values
    t = torch.tensor([1.0, -0.0, 3.14159, 1e-30, 65504.0, float("inf")]).to(torch.bfloat16)
    # when round-tripped
    out = roundtrip(t)
    # then the dtype is bfloat16 and the bits are identical
    assert out.dtype == torch.bfloat16
    assert torch.equal(out.view(torch.int16), t.view(torch.int16))


def test_tensor_requires_grad_is_dropped_and_views_are_materialized(torch: Any) -> None:
    # given a transposed (non-contiguous) tensor that requires grad
    t = torch.randn(3, 5, requires_grad=True).t()
    # when round-tripped
    out = roundtrip({"w": t})["w"]
    # then values match, grad tracking is gone, and the result is writable
    assert torch.equal(out, t.detach())
    assert not out.requires_grad
    out[0, 0] = 42.0
    assert out[0, 0].item() == 42.0


@pytest.mark.parametrize("shape", [(), (0,), (3, 0)], ids=["0-d", "empty", "empty-2d"])
def test_zero_d_and_empty_tensors_round_trip(torch: Any, shape: tuple[int, ...]) -> None:
    # given a 0-d or empty tensor / when round-tripped / then shape and dtype survive
    t = torch.full(shape, 2.5, dtype=torch.float32)
    out = roundtrip(t)
    assert out.shape == t.shape
    assert out.dtype == t.dtype
    assert torch.equal(out, t)


def test_tensor_encoding_matches_ndarray_for_the_same_data(torch: Any) -> None:
    # given the same values as a tensor and an array
    t = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    # when both are round-tripped / then each keeps its own type and the values agree
    out_t, out_a = roundtrip((t, t.numpy()))
    assert isinstance(out_t, torch.Tensor)
    assert isinstance(out_a, np.ndarray)
    assert out_t.tolist() == out_a.tolist()


# -- PIL -------------------------------------------------------------------------------------------


@pytest.fixture
def pil_image() -> Any:
    return pytest.importorskip("PIL.Image")


@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA", "1", "I;16", "F"])
def test_image_round_trips_mode_size_and_pixels(pil_image: Any, mode: str) -> None:
    # given an image with random pixel content
    rng = random.Random(mode)
    img = pil_image.new(mode, (7, 5))
    if mode in ("RGB", "RGBA"):
        img.putdata([tuple(rng.randrange(256) for _ in mode) for _ in range(35)])
    else:
        img.putdata([rng.randrange(256) for _ in range(35)])
    # when round-tripped
    out = roundtrip({"img": img})["img"]
    # then mode, size and the pixel bytes are identical
    assert out.mode == mode
    assert out.size == (7, 5)
    assert out.tobytes() == img.tobytes()


def test_palette_image_keeps_its_palette(pil_image: Any) -> None:
    # given a palette image
    img = pil_image.new("P", (4, 4), color=3)
    img.putpalette([(i * 7) % 256 for i in range(768)])
    # when round-tripped / then pixels and palette both survive
    out = roundtrip(img)
    assert out.mode == "P"
    assert out.tobytes() == img.tobytes()
    assert out.getpalette() == img.getpalette()
    assert out.convert("RGB").tobytes() == img.convert("RGB").tobytes()


# -- thunks and envelopes --------------------------------------------------------------------------


def test_thunk_with_closure_round_trips_and_runs() -> None:
    # given a thunk of a lambda that closes over a local variable
    offset = 40
    t = thunk(lambda x, *, y: x + y + offset, 1, y=1)
    # when round-tripped
    out = roundtrip({"job": t})["job"]
    # then it is a Thunk and calling it runs the captured call
    assert isinstance(out, Thunk)
    assert out() == 42


def test_thunk_of_a_module_function_round_trips_args_of_any_type() -> None:
    # given a thunk whose args include a set and an array (pickled, not msgpack)
    t = thunk(sorted, {3, 1, 2}, reverse=True)
    # when round-tripped / then it runs with the same args
    assert roundtrip(t)() == [3, 2, 1]


def test_thunk_of_something_not_callable_is_refused() -> None:
    # given a non-callable / when wrapped in a thunk / then InvalidArgument names the problem
    with pytest.raises(InvalidArgument, match="callable"):
        thunk(42)  # type: ignore[arg-type]


def test_thunk_with_unpicklable_arg_fails_at_encode_time() -> None:
    # given a thunk holding a lock / when encoded / then InvalidArgument says it cannot pickle
    with pytest.raises(InvalidArgument, match="cannot pickle thunk"):
        encode(thunk(print, threading.Lock()))


def test_exec_envelope_round_trips_equal() -> None:
    # given an exec envelope with cwd, env and a timeout
    env = Envelope.for_exec("python train.py --lr 3e-4", cwd="/srv", env={"A": "1"}, timeout_s=30)
    # when round-tripped / then it is an equal Envelope
    out = roundtrip(env)
    assert out == env
    assert out.kind == "exec"


def test_exec_envelope_is_a_plain_msgpack_map_on_the_wire() -> None:
    # given an encoded exec envelope
    data = encode(Envelope.for_exec("ls -l", cwd="/tmp"))
    # when read by a plain msgpack reader
    ext = msgpack.unpackb(data)
    # then it is ext 33 holding a map a non-Python producer could write
    assert ext.code == EXT_TYPES["envelope"] == 33
    assert msgpack.unpackb(ext.data) == {"kind": "exec", "command": "ls -l", "cwd": "/tmp"}


def test_hand_built_exec_envelope_from_another_language_decodes() -> None:
    # given an envelope frame built with nothing but msgpack
    wire = msgpack.packb({"kind": "exec", "command": "echo hi", "env": {"X": "y"}})
    data = ext_frame(33, wire)
    # when decoded, even without pickles allowed
    out = decode(data, allow_pickle=False)
    # then it is the exec Envelope it describes
    assert out == Envelope.for_exec("echo hi", env={"X": "y"})


def test_raw_envelope_carries_a_value_with_ext_types() -> None:
    # given a raw envelope whose value holds a tuple and an array
    env = Envelope.for_raw({"shape": (2, 2), "x": np.eye(2)})
    # when round-tripped
    out = roundtrip(env)
    # then the value keeps its types
    assert out.kind == "raw"
    assert out.value["shape"] == (2, 2)
    assert np.array_equal(out.value["x"], np.eye(2))


def test_udf_envelope_round_trips_name_and_call() -> None:
    # given a udf envelope around a local function
    scale = 3

    def triple(x: int) -> int:
        return x * scale

    env = Envelope.for_udf(triple, (5,), {}, None, timeout_s=2.5)
    # when round-tripped
    out = roundtrip(env)
    # then the name, kind and timeout survive and the function runs
    assert out.kind == "udf"
    assert out.name is not None and out.name.endswith(":" + triple.__qualname__)
    assert out.timeout_s == 2.5
    assert out.fn is not None and out.fn(*out.args, **out.kwargs) == 15


def test_thunk_envelope_keeps_call() -> None:
    # given an envelope made from a thunk / when round-tripped / then it runs the same call
    out = roundtrip(Envelope.for_thunk(thunk(divmod, 17, 5)))
    assert out.kind == "thunk"
    assert out.fn(*out.args, **out.kwargs) == (3, 2)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: Envelope.for_exec(""), "non-empty command"),
        (lambda: Envelope.for_exec("   "), "non-empty command"),
        (lambda: Envelope.for_udf("not a function", (), {}, None), "callable"),  # type: ignore[arg-type]
        (lambda: Envelope(kind="thunk"), "callable"),
        (lambda: Envelope(kind="python"), "kind"),  # type: ignore[arg-type]
        (lambda: Envelope.for_exec("ls", env={"A": 1}), "env"),  # type: ignore[dict-item]
        (lambda: Envelope.for_raw(1, timeout_s=-1), "timeout_s"),
        (lambda: Envelope.for_thunk(print), "Thunk"),  # type: ignore[arg-type]
    ],
)
def test_invalid_envelopes_are_refused(make: Any, match: str) -> None:
    # given a bad envelope / when built / then InvalidArgument names what was wrong
    with pytest.raises(InvalidArgument, match=match):
        make()


def test_pickles_are_refused_when_decode_disallows_them() -> None:
    # given a thunk and a udf envelope on the wire
    frames = [encode(thunk(print)), encode(Envelope.for_udf(print, (), {}, None))]
    # when decoded with allow_pickle=False / then each is refused without unpickling
    for data in frames:
        with pytest.raises(DecodeError, match="refusing to unpickle"):
            decode(data, allow_pickle=False)


def test_envelope_that_breaks_the_rules_on_the_wire_is_a_decode_error() -> None:
    # given an exec envelope without a command, built by hand
    data = ext_frame(33, msgpack.packb({"kind": "exec"}))
    # when decoded / then DecodeError says the envelope is invalid
    with pytest.raises(DecodeError, match="invalid envelope"):
        decode(data)


# -- refusals --------------------------------------------------------------------------------------


class Opaque:
    pass


@pytest.mark.parametrize("value", [Opaque(), {"nested": [Opaque()]}, {Opaque(): 1}, print])
def test_unencodable_value_names_its_type_and_what_is_allowed(value: Any) -> None:
    # given a value the wire cannot carry / when encoded
    with pytest.raises(InvalidArgument) as info:
        encode(value)
    # then the message names the type and lists the alternatives
    message = str(info.value)
    assert "Opaque" in message or "builtin_function_or_method" in message
    assert "wire-native value" in message
    assert "dls.thunk(...)" in message


def test_very_deep_nesting_is_invalid_argument_not_recursion_error() -> None:
    # given a list nested far deeper than any payload should be
    value: Any = []
    for _ in range(5000):
        value = [value]
    # when encoded / then the failure is InvalidArgument
    with pytest.raises(InvalidArgument):
        encode(value)


# -- decode errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [b"", b"\xc1", b"\x92\x01", b"\x81\xa1a", b"\xdb\xff\xff\xff\xff", b"\x01\x02"],
    ids=["empty", "reserved-byte", "short-array", "short-map", "huge-str", "extra-data"],
)
def test_garbage_bytes_raise_decode_error(data: bytes) -> None:
    # given bytes that are not one msgpack value / when decoded / then DecodeError says so
    with pytest.raises(DecodeError, match="not a msgpack frame"):
        decode(data)


def test_every_truncation_of_a_rich_frame_is_a_decode_error() -> None:
    # given a frame holding every ext type
    data = encode(
        {
            "t": (1, (2,)),
            "a": np.arange(10, dtype=np.float32),
            "s": np.float32(3),
            "d": dt.datetime(2020, 1, 1, tzinfo=ZoneInfo("UTC")),
            "u": uuid.UUID(int=5),
            "e": Envelope.for_exec("ls"),
            "th": thunk(max, 1, 2),
        }
    )
    # when every proper prefix is decoded / then each raises DecodeError and nothing else
    for end in range(len(data)):
        with pytest.raises(DecodeError):
            decode(data[:end])


def test_unknown_ext_code_is_named_in_the_error() -> None:
    # given a frame with ext type 77 / when decoded / then DecodeError names the code
    with pytest.raises(DecodeError, match="unknown ext type 77"):
        decode(ext_frame(77, b"xyz"))


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (b"\x01\x00", "too short"),
        (blob(["<f8", [2], False], b"", header_len=10_000), "says 10000 header bytes"),
        (struct.pack("<I", 2) + b"\xc1\xc1" + b"\0" * 10, "not msgpack"),
        (blob(["<f8", [2]], b"\0" * 16), r"\[dtype, shape, fortran\]"),
        (blob(["|O", [1], False], b"\0" * 8), "not allowed"),
        (blob(["not-a-dtype", [1], False], b"\0" * 8), "bad dtype"),
        (blob([7, [1], False], b"\0" * 8), "bad dtype"),
        (blob(["<f8", [3], False], b"\0" * 16), "needs 24 bytes"),
        (blob(["<f8", [-1], False], b""), "non-negative"),
        (blob(["<f8", "2", False], b"\0" * 16), "shape"),
    ],
    ids=[
        "short",
        "header-past-end",
        "header-not-msgpack",
        "header-missing-field",
        "object-dtype",
        "bad-dtype-string",
        "dtype-not-string",
        "size-mismatch",
        "negative-dim",
        "shape-not-list",
    ],
)
def test_bad_ndarray_headers_raise_decode_error(payload: bytes, match: str) -> None:
    # given an ndarray ext with a broken header / when decoded / then DecodeError says what
    with pytest.raises(DecodeError, match=match):
        decode(ext_frame(16, payload))


@pytest.mark.parametrize(
    ("code", "payload", "match"),
    [
        (1, b"\x81\xa1a\x01", "not an array"),
        (4, msgpack.packb(["nonsense", None]), "datetime"),
        (4, msgpack.packb([1]), "datetime"),
        (5, b"2020-13-45", "date"),
        (6, msgpack.packb([1, "2", 3]), "timedelta"),
        (7, b"short", "16 bytes"),
        (8, b"", "bigint"),
        (32, b"not a pickle", "could not unpickle thunk"),
        (32, __import__("pickle").dumps(5), "not a Thunk"),
        (33, msgpack.packb([1, 2]), "map"),
        (33, msgpack.packb({"kind": "udf"}), "pickle"),
        (17, blob(["<f4", [2], False], b"\0" * 8), "shape must be"),
    ],
    ids=[
        "tuple-not-array",
        "datetime-bad-iso",
        "datetime-bad-shape",
        "date-bad",
        "timedelta-bad",
        "uuid-short",
        "bigint-empty",
        "thunk-garbage",
        "thunk-wrong-type",
        "envelope-not-map",
        "udf-without-pickle",
        "scalar-not-0d",
    ],
)
def test_bad_ext_payloads_raise_decode_error(code: int, payload: bytes, match: str) -> None:
    # given a known ext code with a malformed payload / when decoded / then DecodeError
    with pytest.raises(DecodeError, match=match):
        decode(ext_frame(code, payload))


def test_bad_tensor_and_image_headers_raise_decode_error(torch: Any, pil_image: Any) -> None:
    # given tensor and image exts with broken headers / when decoded / then DecodeError
    with pytest.raises(DecodeError, match="unknown torch dtype"):
        decode(ext_frame(18, blob(["no_such_dtype", [1]], b"\0" * 4)))
    with pytest.raises(DecodeError, match="unknown torch dtype"):
        decode(ext_frame(18, blob(["__class__", [1]], b"\0" * 4)))
    with pytest.raises(DecodeError, match="needs 8 bytes"):
        decode(ext_frame(18, blob(["float32", [2]], b"\0" * 4)))
    with pytest.raises(DecodeError, match="image"):
        decode(ext_frame(19, blob(["RGB", [4, 4], None], b"\0" * 5)))
    with pytest.raises(DecodeError, match="image"):
        decode(ext_frame(19, blob(["NOPE", [1, 1], None], b"\0" * 3)))


def test_non_bytes_input_is_a_decode_error() -> None:
    # given a str instead of bytes / when decoded / then DecodeError, not TypeError
    with pytest.raises(DecodeError):
        decode("not bytes")  # type: ignore[arg-type]


def test_random_bytes_never_escape_as_anything_but_decode_error() -> None:
    # given many random frames, some starting with ext headers
    rng = random.Random(1234)
    for i in range(3000):
        prefix = bytes([0xC7, rng.randrange(40), rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 16, 17, 33])])
        body = rng.randbytes(rng.randrange(0, 40))
        data = prefix + body if i % 2 else body
        # when decoded / then it either decodes or raises DecodeError
        with contextlib.suppress(DecodeError):
            decode(data)


# -- import hygiene and constants ------------------------------------------------------------------


def test_encoding_a_plain_dict_imports_no_optional_library() -> None:
    # given a fresh interpreter / when it encodes and decodes a plain dict with a tuple
    code = (
        "import sys\n"
        "from dreamlake.lakeshore.codec import encode, decode\n"
        "assert decode(encode({'a': [1, (2, 3)], 'b': 'x'})) == {'a': [1, (2, 3)], 'b': 'x'}\n"
        "print(sorted(m for m in ('numpy', 'torch', 'PIL', 'cloudpickle') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    # then none of numpy, torch, PIL or cloudpickle was imported
    assert result.stdout.strip() == "[]"


def test_decoding_an_array_without_numpy_is_a_decode_error_naming_numpy() -> None:
    # given an encoded array and an interpreter where numpy cannot be imported
    data = encode(np.arange(3))
    code = (
        "import sys\n"
        "sys.modules['numpy'] = None\n"
        "from dreamlake.lakeshore.codec import decode\n"
        "from dreamlake.lakeshore.errors import DecodeError\n"
        "try:\n"
        "    decode(sys.stdin.buffer.read())\n"
        "except DecodeError as e:\n"
        "    print('DecodeError:', e)\n"
    )
    # when it decodes the array
    result = subprocess.run(
        [sys.executable, "-c", code], input=data, capture_output=True, timeout=60, check=True
    )
    # then it fails as DecodeError saying numpy is missing
    out = result.stdout.decode()
    assert out.startswith("DecodeError:")
    assert "numpy" in out


def test_constants_and_ext_codes_are_stable() -> None:
    # given the published constants / then they hold the values producers rely on
    assert CODEC_VERSION == 1
    assert PICKLE_PROTOCOL == 5
    assert len(set(EXT_TYPES.values())) == len(EXT_TYPES)
    assert EXT_TYPES["tuple"] == 1
    assert EXT_TYPES["ndarray"] == 16
    assert EXT_TYPES["tensor"] == 18
    assert EXT_TYPES["thunk"] == 32
    assert all(0 <= code <= 127 for code in EXT_TYPES.values())
