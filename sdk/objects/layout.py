"""One object's bytes, the same in every tier: a small header, then the body at an aligned offset.

``b"LKOBJ001" | u32 LE header length | msgpack header | zero padding to 64 bytes | body``

Why this shape: an array's body is its raw C-ordered buffer, so a reader that maps the bytes
gets a numpy view without decoding or copying, and the body starts aligned for any dtype and for
SIMD loads. Any other value's body is its codec encoding. The header says which; the Ref says
the body's size and xxh3-128 hash, which every read checks, so a truncated or altered copy is
`ObjectCorrupt`, never a wrong array.
"""

from __future__ import annotations

import struct
import sys
import weakref
from collections.abc import Callable
from typing import Any, Final

import msgpack
import xxhash

from .. import codec
from ..errors import DecodeError
from ..ref import Ref

MAGIC: Final = b"LKOBJ001"
#: The body starts at a multiple of this: aligned for any dtype and for SIMD loads.
ALIGN: Final = 64
PREFIX: Final = struct.Struct("<8sI")


class ObjectCorrupt(DecodeError):
    """A copy of an object that is not what its Ref says: truncated, altered, or not an object."""

    code = "object_corrupt"


def body_of(value: Any) -> tuple[dict[str, Any], memoryview]:
    """The header and body for `value`: an array's own buffer (no copy when C-contiguous), else
    the codec's encoding (`dls.encode`'s rules: what it cannot carry is refused)."""
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.ndarray) and raw_dtype(value.dtype):
        arr = np.ascontiguousarray(value)
        flat = arr.reshape(-1).view(np.uint8)
        header = {"kind": "ndarray", "dtype": arr.dtype.str, "shape": list(arr.shape)}
        return header, memoryview(flat)
    return {"kind": "value"}, memoryview(codec.encode(value))


def raw_dtype(dtype: Any) -> bool:
    """Plain fixed-size dtypes are laid out raw; objects and structured ones go through the codec
    (which refuses the first and keeps the field names of the second)."""
    return not dtype.hasobject and dtype.names is None and dtype.itemsize > 0


def prefix_of(header: dict[str, Any]) -> bytes:
    """Everything before the body, padded so that the body starts aligned."""
    head: bytes = msgpack.packb(header, use_bin_type=True)
    start = PREFIX.size + len(head)
    return PREFIX.pack(MAGIC, len(head)) + head + bytes(-start % ALIGN)


def digest_of(body: memoryview) -> str:
    return xxhash.xxh3_128_hexdigest(body)


def checked_body(view: memoryview, ref: Ref, where: str) -> tuple[dict[str, Any], memoryview]:
    """The header and body of the copy in `view`, once proved to be what `ref` says."""
    if len(view) < PREFIX.size:
        raise ObjectCorrupt(f"object {ref.id} at {where} is {len(view)} bytes: not an object")
    magic, head_len = PREFIX.unpack_from(view)
    if magic != MAGIC:
        raise ObjectCorrupt(f"object {ref.id} at {where} does not start with {MAGIC!r}")
    start = PREFIX.size + head_len
    try:
        header = msgpack.unpackb(view[PREFIX.size : start], raw=False)
    except Exception as exc:
        raise ObjectCorrupt(f"object {ref.id} at {where} has an unreadable header: {exc}") from None
    if not isinstance(header, dict) or header.get("kind") != ref.kind:
        raise ObjectCorrupt(f"object {ref.id} at {where} does not hold a {ref.kind}")
    body = view[start + (-start % ALIGN) :]
    if len(body) != ref.size:
        raise ObjectCorrupt(
            f"object {ref.id} at {where} is truncated or padded: {len(body)} bytes of body, "
            f"its Ref says {ref.size}"
        )
    if digest_of(body) != ref.digest:
        raise ObjectCorrupt(f"object {ref.id} at {where} does not match its Ref's hash")
    return header, body


def value_of(
    header: dict[str, Any],
    body: memoryview,
    *,
    allow_pickle: bool,
    on_release: Callable[[], None] | None = None,
) -> Any:
    """The value a checked body holds: an array as a read-only view over `body`, no copy.

    `on_release` runs once nothing uses the bytes any more: when the last view of an array is
    gone, or at once for other values (decoded from a private copy of the body).
    """
    if header.get("kind") == "ndarray":
        import numpy as np

        flat = np.frombuffer(body.toreadonly(), dtype=np.dtype(header["dtype"]))
        if on_release is not None:
            # Every view numpy derives from `flat` keeps `flat` alive: its end is the last use.
            weakref.finalize(flat, on_release)
        return flat.reshape(header["shape"])
    if on_release is None:
        return codec.decode(body, allow_pickle=allow_pickle)
    try:
        private = bytes(body)
    finally:
        on_release()
    return codec.decode(private, allow_pickle=allow_pickle)
