"""Whether a submitted payload would run code on a worker, told from its msgpack bytes alone.

A token without the `submit-code` scope may send plain values and `raw` envelopes only
(docs/security.md). The server cannot ask the codec (decoding unpickles, which is the very thing
to prevent here, and the server never decodes a payload), so it reads the msgpack structure
itself: every ext of the codec is either plain data the worker decodes without unpickling, or
one of the few that carry code:

- ext 32, a thunk: cloudpickle bytes;
- ext 33, an envelope whose `kind` is `thunk` or `udf` (a pickle of the call) or `exec` (a shell
  command the worker runs: code as surely as a pickle is);
- a payload that is one spilled ref (ext 48 under a spill prefix, or ext 49 flagged `spilled`):
  its bytes live in storage where the server cannot look, and the worker decodes them with
  pickles allowed.

A thunk can hide anywhere a value can (a dict's value, a tuple's item, a raw envelope's value),
and unpickling happens as the worker decodes, before any type check: so the whole structure is
walked, into tuples, sets and envelopes, which are msgpack inside their ext. Nothing is
unpickled and no ext but those containers is opened. Containers are dropped as soon as they are
read, so the walk holds little beyond the body itself, and it stops at the first piece of code.

A payload with no byte that can start an ext (0xc7-0xc9, 0xd4-0xd8) holds no ext at all: that
is a few memchr scans, which is most JSON-like payloads. Tokens with `submit-code`
skip the check entirely (they may send anything), so the default token pays nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import msgpack

from dreamlake.lakeshore.codec import (
    CODEC_VERSION,
    EXT_BIGINT,
    EXT_DATE,
    EXT_DATETIME,
    EXT_ENVELOPE,
    EXT_FROZENSET,
    EXT_IMAGE,
    EXT_NDARRAY,
    EXT_NUMPY_SCALAR,
    EXT_OBJECT_REF,
    EXT_SET,
    EXT_STORAGE_REF,
    EXT_TENSOR,
    EXT_THUNK,
    EXT_TIMEDELTA,
    EXT_TUPLE,
    EXT_UUID,
)
from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.storage import SPILLED_PREFIXES

#: Tuples, sets and envelopes inside one another, at most; a deeper payload is refused (400).
#: Each level inside one ext is also bounded, by msgpack's own limit of 1024 nested containers.
MAX_EXT_NESTING: Final = 64

#: Any byte that can start a msgpack ext (fixext 1-16, ext 8/16/32); each is one memchr scan.
_EXT_MARKERS: Final = tuple(bytes([b]) for b in (0xC7, 0xC8, 0xC9, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8))
#: Exts whose contents are walked: msgpack of further values.
_CONTAINERS: Final = frozenset({EXT_TUPLE, EXT_SET, EXT_FROZENSET})
#: Exts a worker decodes without unpickling anything and without looking for nested exts
#: (their contents are plain msgpack or raw bytes: codec.py's table).
_PLAIN: Final = frozenset(
    {
        EXT_DATETIME,
        EXT_DATE,
        EXT_TIMEDELTA,
        EXT_UUID,
        EXT_BIGINT,
        EXT_NDARRAY,
        EXT_NUMPY_SCALAR,
        EXT_TENSOR,
        EXT_IMAGE,
    }
)
_REFS: Final = frozenset({EXT_STORAGE_REF, EXT_OBJECT_REF})
#: Envelope kinds and what each one is, for the message.
_CODE_KINDS: Final = {
    b"thunk": "a thunk envelope (pickled code)",
    b"udf": "a udf call (pickled code)",
    b"exec": "an exec envelope (a shell command)",
}
_KINDS: Final = "thunk|udf|exec|raw"


class _Found(Exception):
    """Raised out of the msgpack hooks at the first piece of code: the walk stops there."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


@dataclass(frozen=True)
class _Ref:
    """A storage or object ref, kept so that the caller can see whether it is the whole payload."""

    code: int
    data: bytes


@dataclass
class _Head:
    """What an envelope map says about itself: every `kind` it names, and whether it carries a
    `pickle` (duplicate keys included: the worker's dict keeps the last, so all are checked)."""

    kinds: list[Any]
    pickle: bool


def code_in(payload: bytes | bytearray | memoryview) -> str | None:
    """What in `payload` would run code on a worker ("a thunk", ...), or None for plain data.

    Raises InvalidArgument (400) for a payload the check cannot read: not msgpack, nested too
    deeply, an ext type this codec does not know, or an envelope no worker could run.
    """
    data = bytes(payload)
    if not any(marker in data for marker in _EXT_MARKERS):
        return None
    try:
        top = _unpack(data, 0)
        if isinstance(top, _Ref):
            return _spilled(top)
    except _Found as found:
        return found.what
    return None


def _unpack(data: bytes, depth: int, pairs: Any = None) -> Any:
    """msgpack of values at `depth` exts down; maps go to `pairs` (default: dropped)."""
    if depth > MAX_EXT_NESTING:
        raise InvalidArgument(
            f"payload is nested too deeply to check: more than {MAX_EXT_NESTING} tuples, sets "
            "or envelopes inside one another"
        )
    try:
        return msgpack.unpackb(
            data,
            raw=True,
            strict_map_key=False,
            ext_hook=lambda code, ext: _ext(code, ext, depth + 1),
            list_hook=_drop,
            object_pairs_hook=pairs or _drop,
        )
    except msgpack.StackError:
        raise InvalidArgument(
            "payload is nested too deeply to check: more than 1024 containers inside one another"
        ) from None
    except (msgpack.UnpackException, ValueError, TypeError) as exc:
        where = "payload" if depth == 0 else f"an ext inside the payload (depth {depth})"
        raise InvalidArgument(f"{where} is not msgpack: {type(exc).__name__}") from None


def _drop(value: Any) -> None:
    """Forget a container once read: only exts matter, and they were seen on the way in."""
    return None


def _ext(code: int, data: bytes, depth: int) -> Any:
    if code == EXT_THUNK:
        raise _Found("a thunk (pickled code)")
    if code == EXT_ENVELOPE:
        _envelope(data, depth)
        return None
    if code in _CONTAINERS:
        _unpack(data, depth)
        return None
    if code in _REFS:
        return _Ref(code, data)
    if code in _PLAIN:
        return None
    raise InvalidArgument(
        f"payload holds ext type {code}, which this server's codec (version {CODEC_VERSION}) "
        "does not know"
    )


def _envelope(data: bytes, depth: int) -> None:
    """Refuse an envelope that carries code; walk a raw one's fields for nested code."""
    head = _unpack(data, depth, pairs=_head)
    if not isinstance(head, _Head) or not head.kinds:
        raise InvalidArgument(
            f"payload holds an envelope (ext {EXT_ENVELOPE}) that is not a map with a 'kind'"
        )
    for kind in head.kinds:
        if not isinstance(kind, bytes):
            raise InvalidArgument(
                f"payload holds an envelope whose 'kind' is not a string; kinds are {_KINDS}"
            )
        if kind in _CODE_KINDS:
            raise _Found(_CODE_KINDS[kind])
        if kind != b"raw":
            shown = kind.decode("utf-8", "replace")[:40]
            raise InvalidArgument(
                f"payload holds an envelope of unknown kind {shown!r}; kinds are {_KINDS}"
            )
    if head.pickle:
        raise _Found("a raw envelope carrying pickled bytes")


def _head(pairs: list[tuple[Any, Any]]) -> _Head:
    """Every map inside an envelope is reduced to this; the outermost one is the envelope's."""
    return _Head(
        kinds=[v for k, v in pairs if k == b"kind"], pickle=any(k == b"pickle" for k, _ in pairs)
    )


def _spilled(ref: _Ref) -> str | None:
    """A payload that is one ref: code when it is spilled (the worker resolves it, pickles
    allowed); a ref passed on purpose (a dataset, a `dls.put` object) is data."""
    try:
        fields = msgpack.unpackb(ref.data, raw=False, strict_map_key=False)
    except (msgpack.UnpackException, ValueError, TypeError):
        fields = None
    if not isinstance(fields, dict):
        raise InvalidArgument(f"payload is a ref (ext {ref.code}) that is not a msgpack map")
    if ref.code == EXT_OBJECT_REF and fields.get("spilled"):
        return "a spilled payload (its bytes are in storage, out of the server's sight)"
    key = fields.get("key")
    if ref.code == EXT_STORAGE_REF and isinstance(key, str) and key.startswith(SPILLED_PREFIXES):
        return "a spilled payload (its bytes are in storage, out of the server's sight)"
    return None
