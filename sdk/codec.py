"""The payload wire format: msgpack, with ExtTypes for what ML code actually passes around.

Plain msgpack would turn tuples into lists, refuse arrays, and leave every other language to guess
at datetimes. So each such type rides as a msgpack ExtType whose code never changes meaning once
released (bump `CODEC_VERSION` instead). The control plane never calls `decode`: it stores and
forwards the bytes, so nothing it receives is ever unpickled there.

====  ================  ========================================================================
code  Python type       ext payload
====  ================  ========================================================================
1     tuple             msgpack array of the items (nested tuples stay tuples)
2     set               msgpack array of the items
3     frozenset         msgpack array of the items
4     datetime          msgpack [isoformat, zoneinfo key | nil]; naive stays naive
5     date              isoformat string, as UTF-8 bytes
6     timedelta         msgpack [days, seconds, microseconds]
7     uuid.UUID         the 16 raw bytes
8     int (big)         an int outside msgpack's 64 bits: big-endian two's complement bytes
16    numpy.ndarray     blob: header [dtype, shape, fortran] + the raw bytes
17    numpy scalar      blob: header [dtype, [], false] + the raw bytes (decodes to a scalar)
18    torch.Tensor      blob: header [dtype name, shape] + the raw bytes (bfloat16 included)
19    PIL.Image.Image   blob: header [mode, [width, height], [palette mode, palette] | nil] + raw
32    Thunk             cloudpickle bytes (protocol: see `pickle_protocol`, default 5)
33    Envelope          msgpack map (see below)
48    StorageRef        msgpack map {url, key, size}: bytes kept in storage (see `storage.py`)
49    Ref               msgpack map {id, size, digest, kind, ...}: an object store handle (`ref.py`)
====  ================  ========================================================================

msgpack's own timestamp (ext -1), as other languages write it, decodes to an aware UTC datetime.

A *blob* is ``u32 little-endian header length | msgpack header | zero padding | raw bytes``; the
raw bytes start at the next multiple of 16 past the header, so a decoded array is an aligned,
zero-copy, read-only view over the ext payload (``.copy()`` it to write). The dtype is numpy's
``dtype.str`` (``"<f4"``, ``"<M8[ns]"``), or the ``.npy`` descr list for a structured dtype; an
array that is Fortran-ordered is sent in that order and comes back Fortran-ordered, any other
non-contiguous view is sent as a C-ordered copy. Object arrays are refused both ways: they hold
Python objects, not data. Tensors are detached and moved to the CPU (``requires_grad`` is
dropped) and decode as a writable tensor (one copy). An image keeps mode, size and palette; its
``info`` and EXIF do not ride.

The Envelope map always has ``kind`` (``"thunk"``, ``"udf"``, ``"exec"``, ``"raw"``) and, when
set, ``name``, ``command``, ``cwd``, ``env``, ``value``, ``timeout_s``, ``run`` (the producer's
run id, see `dls.context`) and ``trace`` (its OpenTelemetry trace context, a map of W3C
``traceparent`` / ``tracestate`` headers, see sdk/tracing.py). A thunk or udf adds
``pickle``: the cloudpickle bytes of ``(fn, args, kwargs)``, and ``pickled_by``: who wrote them
(``{python, implementation, protocol, cloudpickle}``, see `protocols.py`), so a worker that
cannot load them names both sides' versions. An exec or raw envelope is therefore
plain msgpack that any language can build, and a reader can see a udf's ``kind`` and ``name``
without unpickling anything.

Subclasses of wire-native types are sent as their base type (a namedtuple as a tuple, an
IntEnum as an int, an OrderedDict as a dict). Anything else is refused with `InvalidArgument`;
bytes that cannot be decoded raise `DecodeError`.

This module is the format's core: the ext table, the dispatch both ways, and the types of the
standard library. Blobs (arrays, tensors, images) are codec_blobs.py's, pickles codec_pickle.py's.
"""

from __future__ import annotations

import datetime as _dt
import sys
from collections.abc import Callable, Mapping
from types import MappingProxyType, ModuleType
from typing import TYPE_CHECKING, Any, Final

import msgpack  # ships no type information

from . import protocols
from .codec_blobs import EXT_TUPLE as _EXT_TUPLE
from .codec_blobs import (
    array_blob,
    decode_image,
    decode_ndarray,
    decode_numpy_scalar,
    decode_tensor,
    describe,
    image_blob,
    tensor_blob,
)
from .codec_pickle import PICKLE_PROTOCOL, chosen_protocol, pickle_protocol, pickled, unpickled
from .envelope import Envelope, Thunk
from .errors import DecodeError, InvalidArgument
from .ref import EXT_OBJECT_REF as _EXT_OBJECT_REF
from .ref import Ref
from .storage import EXT_STORAGE_REF as _EXT_STORAGE_REF
from .storage import StorageRef

if TYPE_CHECKING:  # uuid, pickle and ctypes are imported where used, not with the SDK
    import uuid

__all__ = [
    "CODEC_VERSION",
    "EXT_TYPES",
    "PICKLE_PROTOCOL",
    "decode",
    "encode",
    "pickle_protocol",
]

#: Advertised by `GET /v1/hello`; bumped when an ext payload changes shape.
CODEC_VERSION: Final = 1

EXT_TUPLE: Final = _EXT_TUPLE  # 1, defined beside the blob header that may hold tuples
EXT_SET: Final = 2
EXT_FROZENSET: Final = 3
EXT_DATETIME: Final = 4
EXT_DATE: Final = 5
EXT_TIMEDELTA: Final = 6
EXT_UUID: Final = 7
EXT_BIGINT: Final = 8
EXT_NDARRAY: Final = 16
EXT_NUMPY_SCALAR: Final = 17
EXT_TENSOR: Final = 18
EXT_IMAGE: Final = 19
EXT_THUNK: Final = 32
EXT_ENVELOPE: Final = 33
EXT_STORAGE_REF: Final = _EXT_STORAGE_REF  # 48, defined beside StorageRef
EXT_OBJECT_REF: Final = _EXT_OBJECT_REF  # 49, defined beside Ref

#: Name to ext code, for `GET /v1/hello` and for writers in other languages.
EXT_TYPES: Final[Mapping[str, int]] = MappingProxyType(
    {
        "tuple": EXT_TUPLE,
        "set": EXT_SET,
        "frozenset": EXT_FROZENSET,
        "datetime": EXT_DATETIME,
        "date": EXT_DATE,
        "timedelta": EXT_TIMEDELTA,
        "uuid": EXT_UUID,
        "bigint": EXT_BIGINT,
        "ndarray": EXT_NDARRAY,
        "numpy_scalar": EXT_NUMPY_SCALAR,
        "tensor": EXT_TENSOR,
        "image": EXT_IMAGE,
        "thunk": EXT_THUNK,
        "envelope": EXT_ENVELOPE,
        "storage_ref": EXT_STORAGE_REF,
        "object_ref": EXT_OBJECT_REF,
    }
)
_EXT_NAMES: Final = {code: name for name, code in EXT_TYPES.items()}

_ALLOWED: Final = (
    "use a wire-native value (None, bool, int, float, str, bytes, list, dict, tuple, "
    "ndarray, tensor, image, datetime, UUID) or dls.thunk(...)"
)
_BUF_SIZE: Final = 512
_ExtType = msgpack.ExtType


# -- encode ---------------------------------------------------------------------------------------


def encode(obj: Any) -> bytes:
    """Serialize a payload to wire bytes.

    Raises `InvalidArgument` for a value the wire cannot carry, naming its type, so a producer
    learns at submit time rather than when a worker fails to decode.
    """
    try:
        return _packb(obj)
    except InvalidArgument:
        raise
    except (ValueError, TypeError, OverflowError, RecursionError) as e:
        raise InvalidArgument(f"cannot encode payload: {type(e).__name__}: {e}") from e


def _packb(obj: Any) -> bytes:
    # A Packer per call: it costs well under a microsecond, and a shared one would be corrupted by
    # a nested encode (an ext payload, or a user's __reduce__ calling encode) or by threads.
    # strict_types routes tuples (and subclasses of native types) through `_default`, which is
    # the only way to keep a tuple a tuple. A small starting buffer (msgpack grows it by doubling)
    # because the default of a MiB-ish one made each nested ext payload cost ~10 us in malloc.
    data: bytes = msgpack.packb(
        obj, use_bin_type=True, strict_types=True, default=_default, buf_size=_BUF_SIZE
    )
    return data


def _default(obj: Any) -> Any:
    encoder = _ENCODERS.get(type(obj))
    if encoder is not None:
        return encoder(obj)
    return _encode_other(obj)


def _encode_other(obj: Any) -> Any:
    # Only modules the caller already imported can have produced `obj`, so looking in
    # sys.modules keeps numpy, torch and Pillow unimported for payloads that never use them.
    np = sys.modules.get("numpy")
    if np is not None and isinstance(obj, (np.ndarray, np.generic)):
        return _encode_numpy(obj, np)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return _ExtType(EXT_TENSOR, tensor_blob(obj, torch))
    pil_image = sys.modules.get("PIL.Image")
    if pil_image is not None and isinstance(obj, pil_image.Image):
        return _ExtType(EXT_IMAGE, image_blob(obj))
    uuid_module = sys.modules.get("uuid")  # likewise: a UUID exists only once uuid is imported
    if uuid_module is not None and isinstance(obj, uuid_module.UUID):
        return _encode_uuid(obj)
    return _encode_subclass(obj)


def _encode_subclass(obj: Any) -> Any:
    for base, encoder in _SUBCLASS_ENCODERS:
        if isinstance(obj, base):
            return encoder(obj)
    cls = type(obj)
    raise InvalidArgument(f"cannot encode a {cls.__module__}.{cls.__qualname__}: {_ALLOWED}")


def _encode_tuple(obj: tuple[Any, ...]) -> msgpack.ExtType:
    return _ExtType(EXT_TUPLE, _packb(list(obj)))


def _encode_set(obj: set[Any]) -> msgpack.ExtType:
    return _ExtType(EXT_SET, _packb(list(obj)))


def _encode_frozenset(obj: frozenset[Any]) -> msgpack.ExtType:
    return _ExtType(EXT_FROZENSET, _packb(list(obj)))


def _encode_datetime(obj: _dt.datetime) -> msgpack.ExtType:
    # isoformat keeps microseconds and the UTC offset, and other languages parse it; the zone key
    # brings a ZoneInfo back as itself rather than as a fixed offset.
    key = getattr(obj.tzinfo, "key", None)
    return _ExtType(EXT_DATETIME, _packb([obj.isoformat(), key if isinstance(key, str) else None]))


def _encode_date(obj: _dt.date) -> msgpack.ExtType:
    return _ExtType(EXT_DATE, obj.isoformat().encode())


def _encode_timedelta(obj: _dt.timedelta) -> msgpack.ExtType:
    return _ExtType(EXT_TIMEDELTA, _packb([obj.days, obj.seconds, obj.microseconds]))


def _encode_uuid(obj: uuid.UUID) -> msgpack.ExtType:
    return _ExtType(EXT_UUID, obj.bytes)


def _encode_int(obj: int) -> Any:
    value = int(obj)
    if -(2**63) <= value < 2**64:
        return value
    return _ExtType(EXT_BIGINT, value.to_bytes((value.bit_length() + 8) // 8, "big", signed=True))


def _encode_thunk(obj: Thunk[Any]) -> msgpack.ExtType:
    # No room for a header in ext 32 (it has always been bare pickle bytes): a worker that cannot
    # load one reads its protocol from the bytes. A submitted thunk rides as an envelope.
    return _ExtType(EXT_THUNK, pickled(obj, "thunk", chosen_protocol()))


def _encode_envelope(obj: Envelope) -> msgpack.ExtType:
    wire: dict[str, Any] = {"kind": obj.kind}
    for key in _ENVELOPE_KEYS:
        value = getattr(obj, key)
        if value is not None:
            wire[key] = value
    if obj.kind in ("thunk", "udf"):
        protocol = chosen_protocol()
        wire["pickle"] = pickled((obj.fn, obj.args, obj.kwargs), f"{obj.kind} envelope", protocol)
        wire["pickled_by"] = protocols.pickled_by(protocol)
    return _ExtType(EXT_ENVELOPE, _packb(wire))


def _encode_numpy(obj: Any, np: ModuleType) -> msgpack.ExtType:
    if isinstance(obj, np.generic):
        return _ExtType(EXT_NUMPY_SCALAR, array_blob(np.asarray(obj), np))
    if type(obj).__module__.startswith("numpy.ma"):
        raise InvalidArgument(
            "cannot encode a numpy masked array: the mask would be lost; send "
            "(arr.data, arr.mask) or arr.filled(...)"
        )
    return _ExtType(EXT_NDARRAY, array_blob(np.asarray(obj), np))


_ENCODERS: Final[dict[type, Callable[[Any], Any]]] = {
    tuple: _encode_tuple,
    set: _encode_set,
    frozenset: _encode_frozenset,
    _dt.datetime: _encode_datetime,
    _dt.date: _encode_date,
    _dt.timedelta: _encode_timedelta,
    int: _encode_int,
    Thunk: _encode_thunk,
    Envelope: _encode_envelope,
    StorageRef: lambda ref: _ExtType(EXT_STORAGE_REF, ref.to_wire()),
    Ref: lambda ref: _ExtType(EXT_OBJECT_REF, ref.to_wire()),
}

# Checked in order, so datetime comes before its base class date.
_SUBCLASS_ENCODERS: Final[tuple[tuple[type, Callable[[Any], Any]], ...]] = (
    (tuple, _encode_tuple),
    (Thunk, _encode_thunk),
    (Envelope, _encode_envelope),
    (int, _encode_int),
    (float, float),
    (str, str.__str__),  # not str(): a str-mixin Enum's __str__ gives "Color.RED"
    (bytes, bytes),
    (list, list),
    (dict, dict),
    (_dt.datetime, _encode_datetime),
    (_dt.date, _encode_date),
    (_dt.timedelta, _encode_timedelta),
    (frozenset, _encode_frozenset),
    (set, _encode_set),
)


# -- decode ---------------------------------------------------------------------------------------


def decode(data: bytes | bytearray | memoryview, *, allow_pickle: bool = True) -> Any:
    """Deserialize wire bytes written by `encode` (or by any msgpack writer).

    `allow_pickle=False` refuses thunks and udf envelopes instead of unpickling them, for a
    reader that must not run code it was sent. Every failure is a `DecodeError` saying what
    could not be decoded; no msgpack, pickle or numpy exception escapes.
    """
    try:
        return _unpackb(data, allow_pickle)
    except DecodeError:
        raise
    except (msgpack.UnpackException, ValueError) as e:
        raise DecodeError(f"not a msgpack frame: {describe(e)}") from e
    except Exception as e:
        raise DecodeError(f"could not decode payload: {describe(e)}") from e


def _unpackb(data: Any, allow_pickle: bool) -> Any:
    return msgpack.unpackb(
        data,
        ext_hook=_hook_trusted if allow_pickle else _hook_untrusted,
        raw=False,
        strict_map_key=False,
        timestamp=3,
    )


def _hook_trusted(code: int, data: bytes) -> Any:
    return _decode_ext(code, data, True)


def _hook_untrusted(code: int, data: bytes) -> Any:
    return _decode_ext(code, data, False)


def _decode_ext(code: int, data: bytes, allow_pickle: bool) -> Any:
    decoder = _DECODERS.get(code)
    if decoder is None:
        raise DecodeError(
            f"unknown ext type {code}: this codec (version {CODEC_VERSION}) "
            f"knows {sorted(_DECODERS)}"
        )
    try:
        return decoder(data, allow_pickle)
    except DecodeError:
        raise
    except Exception as e:
        raise DecodeError(
            f"could not decode {_EXT_NAMES[code]} (ext type {code}): {describe(e)}"
        ) from e


def _decode_items(data: bytes, allow_pickle: bool, what: str) -> list[Any]:
    items = _unpackb(data, allow_pickle)
    if not isinstance(items, list):
        raise DecodeError(f"{what} payload is a {type(items).__name__}, not an array")
    return items


def _decode_tuple(data: bytes, allow_pickle: bool) -> tuple[Any, ...]:
    return tuple(_decode_items(data, allow_pickle, "tuple"))


def _decode_set(data: bytes, allow_pickle: bool) -> set[Any]:
    return set(_decode_items(data, allow_pickle, "set"))


def _decode_frozenset(data: bytes, allow_pickle: bool) -> frozenset[Any]:
    return frozenset(_decode_items(data, allow_pickle, "frozenset"))


def _decode_datetime(data: bytes, allow_pickle: bool) -> _dt.datetime:
    fields = _decode_items(data, False, "datetime")
    if len(fields) != 2 or not isinstance(fields[0], str):
        raise DecodeError(f"datetime payload must be [isoformat, zone key], got {fields!r}")
    iso, key = fields
    value = _dt.datetime.fromisoformat(iso)
    if isinstance(key, str) and value.tzinfo is not None:
        return _in_zone(value, key)
    return value


def _in_zone(value: _dt.datetime, key: str) -> _dt.datetime:
    """Put the zone back on the same wall time, with the fold that gives the sent offset."""
    try:
        from zoneinfo import ZoneInfo

        zone = ZoneInfo(key)
    except Exception:  # no tzdata for that key here: the fixed offset is still right
        return value
    for fold in (0, 1):
        zoned = value.replace(tzinfo=zone, fold=fold)
        if zoned.utcoffset() == value.utcoffset():
            return zoned
    return value  # the zone's rules here disagree with the sender's: keep what was sent


def _decode_date(data: bytes, allow_pickle: bool) -> _dt.date:
    return _dt.date.fromisoformat(data.decode())


def _decode_timedelta(data: bytes, allow_pickle: bool) -> _dt.timedelta:
    fields = _decode_items(data, False, "timedelta")
    if len(fields) != 3 or not all(type(f) is int for f in fields):
        raise DecodeError(
            f"timedelta payload must be [days, seconds, microseconds], got {fields!r}"
        )
    return _dt.timedelta(days=fields[0], seconds=fields[1], microseconds=fields[2])


def _decode_uuid(data: bytes, allow_pickle: bool) -> uuid.UUID:
    if len(data) != 16:
        raise DecodeError(f"uuid payload must be 16 bytes, got {len(data)}")
    import uuid

    return uuid.UUID(bytes=data)


def _decode_bigint(data: bytes, allow_pickle: bool) -> int:
    if not data:
        raise DecodeError("bigint payload is empty")
    return int.from_bytes(data, "big", signed=True)


def _decode_thunk(data: bytes, allow_pickle: bool) -> Thunk[Any]:
    value = unpickled(data, allow_pickle, "thunk")
    if not isinstance(value, Thunk):
        raise DecodeError(f"thunk payload unpickled to a {type(value).__name__}, not a Thunk")
    return value


_ENVELOPE_KEYS: Final = ("name", "command", "cwd", "env", "value", "timeout_s", "run", "trace")


def _decode_envelope(data: bytes, allow_pickle: bool) -> Envelope:
    wire = _unpackb(data, allow_pickle)
    if not isinstance(wire, dict) or not isinstance(wire.get("kind"), str):
        raise DecodeError("envelope payload must be a map with a str 'kind'")
    kind = wire["kind"]
    fields: dict[str, Any] = {key: wire[key] for key in _ENVELOPE_KEYS if key in wire}
    if kind in ("thunk", "udf"):
        pickled = wire.get("pickle")
        if not isinstance(pickled, bytes):
            raise DecodeError(f"{kind} envelope has no 'pickle' bytes")
        producer = wire.get("pickled_by")
        call = unpickled(
            pickled,
            allow_pickle,
            f"{kind} envelope",
            producer if isinstance(producer, dict) else None,
        )
        if not isinstance(call, tuple) or len(call) != 3:
            raise DecodeError(f"{kind} envelope 'pickle' must hold (fn, args, kwargs)")
        fields.update(fn=call[0], args=call[1], kwargs=call[2])
    try:
        return Envelope(kind=kind, **fields)
    except InvalidArgument as e:
        raise DecodeError(f"invalid envelope: {e}") from e


_DECODERS: Final[dict[int, Callable[[bytes, bool], Any]]] = {
    EXT_TUPLE: _decode_tuple,
    EXT_SET: _decode_set,
    EXT_FROZENSET: _decode_frozenset,
    EXT_DATETIME: _decode_datetime,
    EXT_DATE: _decode_date,
    EXT_TIMEDELTA: _decode_timedelta,
    EXT_UUID: _decode_uuid,
    EXT_BIGINT: _decode_bigint,
    EXT_NDARRAY: decode_ndarray,
    EXT_NUMPY_SCALAR: decode_numpy_scalar,
    EXT_TENSOR: decode_tensor,
    EXT_IMAGE: decode_image,
    EXT_THUNK: _decode_thunk,
    EXT_ENVELOPE: _decode_envelope,
    EXT_STORAGE_REF: lambda data, allow_pickle: StorageRef.from_wire(data),
    EXT_OBJECT_REF: lambda data, allow_pickle: Ref.from_wire(data),
}
