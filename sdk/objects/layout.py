"""One object's bytes, the same in every tier: a small header, then the body at an aligned offset.

``b"LKOBJ001" | u32 LE header length | msgpack header | zero padding to 64 bytes | body``

Why this shape: an array's body is its raw C-ordered buffer, so a reader that maps the bytes
gets a numpy view without decoding or copying, and the body starts aligned for any dtype and for
SIMD loads. A torch CPU tensor is laid out the same way (its dtype by torch's name, bfloat16
included). Any other value's body is its codec encoding. The header says which; the Ref says
the body's size and xxh3-128 hash, which every read checks, so a truncated or altered copy is
`ObjectCorrupt`, never a wrong array.
"""

from __future__ import annotations

import struct
import sys
import warnings
import weakref
from collections.abc import Callable
from typing import Any, Final

import msgpack
import xxhash

from dreamlake.lakeshore import codec
from dreamlake.lakeshore.errors import DecodeError
from dreamlake.lakeshore.ref import Ref

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
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor) and raw_tensor(value, torch):
        return _tensor_body(value, torch)
    return {"kind": "value"}, memoryview(codec.encode(value))


def raw_tensor(t: Any, torch: Any) -> bool:
    """A dense, unquantized tensor with data is laid out raw; the codec refuses or explains the
    rest (sparse, quantized, meta)."""
    return bool(t.layout == torch.strided and not t.is_quantized and t.device.type != "meta")


def _tensor_body(t: Any, torch: Any) -> tuple[dict[str, Any], memoryview]:
    """A tensor's raw bytes, read in place when it is a contiguous CPU tensor (else one copy).

    The bytes are read through ctypes rather than `Tensor.numpy()`, which refuses bfloat16; the
    buffer keeps the tensor alive while anything still reads it.
    """
    import ctypes

    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.resolve_conj().resolve_neg().contiguous()
    header = {
        "kind": "tensor",
        "dtype": str(t.dtype).removeprefix("torch."),
        "shape": list(t.shape),
    }
    nbytes = t.numel() * t.element_size()
    if not nbytes:
        return header, memoryview(b"")
    raw: Any = (ctypes.c_char * nbytes).from_address(t.data_ptr())
    raw.tensor = t  # the memory `raw` points at is the tensor's: keep it alive with `raw`
    return header, memoryview(raw).cast("B")


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


#: Copy and hash this much at a time: small enough that the hash reads what the copy just wrote
#: from the CPU's cache, large enough that the loop's own cost stays negligible.
_COPY_CHUNK: Final = 256 << 10


def copy_hashing(dst: memoryview, src: memoryview) -> str:
    """Copy `src` into `dst` and return its digest, in one pass over memory instead of two.

    The hash reads each chunk just after the copy wrote it, while it is still in cache: a put of
    a 64 MiB array costs its copy plus a fraction of a hash, not a copy and a whole second read.
    """
    n = src.nbytes
    if n <= _COPY_CHUNK:
        dst[:n] = src
        return digest_of(dst[:n])
    hasher = xxhash.xxh3_128()
    for start in range(0, n, _COPY_CHUNK):
        end = min(start + _COPY_CHUNK, n)
        dst[start:end] = src[start:end]
        hasher.update(dst[start:end])
    return hasher.hexdigest()


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
    if header.get("kind") == "tensor":
        return _tensor_of(header, body, on_release)
    if on_release is None:
        return codec.decode(body, allow_pickle=allow_pickle)
    try:
        private = bytes(body)
    finally:
        on_release()
    return codec.decode(private, allow_pickle=allow_pickle)


def _tensor_of(
    header: dict[str, Any], body: memoryview, on_release: Callable[[], None] | None
) -> Any:
    """A tensor over `body`, no copy: torch has no read-only tensors, so this one shares the
    object's memory, and writing to it in place would alter the object for this process (any
    other reader's hash check would then refuse it). Callers that write `.clone()` first.
    """
    try:
        import torch
    except ImportError:
        raise DecodeError(
            "this object holds a torch tensor and torch is not installed here: pip install torch"
        ) from None
    name = header.get("dtype")
    dtype = getattr(torch, name, None) if isinstance(name, str) and name.isidentifier() else None
    if not isinstance(dtype, torch.dtype):
        raise DecodeError(f"object header: unknown torch dtype {name!r}")
    shape: list[int] = header["shape"]
    if not body.nbytes:
        if on_release is not None:
            on_release()
        return torch.empty(shape, dtype=dtype)
    import numpy as np

    # The array is what torch holds on to (its storage keeps the buffer): its end is the last
    # view's, whatever views torch derives.
    flat = np.frombuffer(body.toreadonly(), dtype=np.uint8)
    if on_release is not None:
        weakref.finalize(flat, on_release)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given buffer is not writable")
        return torch.frombuffer(flat, dtype=dtype).reshape(shape)
