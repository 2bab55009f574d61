"""The object store: `dls.put(value)` returns a `Ref`, `dls.get(ref)` the value, in tiers.

Why: ML work moves arrays, and a queue that serialises every argument and result through every
hop loses to Ray by an order of magnitude on them. An object is written once; what travels is its
Ref (a few hundred bytes), and a reader on the same box maps the bytes instead of copying them.

Tiers, nearest first:
    host     a directory every process on the box shares: tmpfs under /dev/shm where there is
             one (`/dev/shm/lakeshore-<uid>/<host>`), else `$LAKESHORE_HOME/objects/<host>`
             (`LAKESHORE_OBJECTS` overrides). Not durable: tmpfs is gone on reboot.
    storage  the storage tier (`file://` or `s3://`, as `dls.storage`): written through and
             fsynced before `put` returns unless `durable=False`; any box with access reads it
             and keeps a copy in its own host tier.

Layout (the same bytes in every tier): ``b"LKOBJ001" | u32 LE header length | msgpack header |
zero padding to 64 bytes | body``. An array's body is its raw C-ordered buffer, so a same-host
reader gets a read-only numpy view over the mapped file: reading a 1 GiB array allocates no
second GiB. Any other value's body is its codec encoding. Every read checks the body's size and
xxh3-128 hash against the Ref: a truncated or corrupt copy is `ObjectCorrupt`, never a wrong
array. Writes go to a temporary name and are renamed into place, so no reader sees half an
object.

Not yet (issue 15): the plane tier (objects through the control plane), transparent Refs for
large payloads (the spill), locality-aware claims, eviction and retention of objects.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import socket
import struct
import sys
from pathlib import Path
from typing import IO, Any, Final

import msgpack
import xxhash
from ulid import ULID

from . import codec
from .errors import DecodeError, NotFound
from .home import home
from .ref import Ref
from .storage import Storage
from .storage import storage as open_storage

__all__ = ["ObjectCorrupt", "Ref", "get", "host_id", "host_root", "put"]

MAGIC: Final = b"LKOBJ001"
#: The body starts at a multiple of this: aligned for any dtype and for SIMD loads.
ALIGN: Final = 64
_PREFIX: Final = struct.Struct("<8sI")
#: Where durable copies live in the storage tier.
STORAGE_PREFIX: Final = "_objects"
_HOST_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


class ObjectCorrupt(DecodeError):
    """A copy of an object that is not what its Ref says: truncated, altered, or not an object."""

    code = "object_corrupt"


def host_id() -> str:
    """This box in Refs: `LAKESHORE_HOST_ID`, else the hostname (folded to [A-Za-z0-9._-])."""
    raw = os.environ.get("LAKESHORE_HOST_ID") or socket.gethostname()
    return (_HOST_CHARS.sub("-", raw).strip("-.") or "host")[:128]


def host_root() -> Path:
    """The host tier's directory (created on first use, mode 0700)."""
    explicit = os.environ.get("LAKESHORE_OBJECTS")
    if explicit:
        root = Path(explicit)
    elif os.access("/dev/shm", os.W_OK):
        root = Path("/dev/shm") / f"lakeshore-{os.getuid()}" / host_id()
    else:
        root = home() / "objects" / host_id()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    return root


# -- put ------------------------------------------------------------------------------------------


def put(value: Any, *, durable: bool = True, storage: str | Storage | None = None) -> Ref:
    """Store `value` and return its Ref; durable (storage tier, fsynced) unless `durable=False`.

    A numpy array is stored as its raw buffer (one copy only if it is not C-contiguous); any
    other value as its codec encoding (`dls.encode`'s rules: what it cannot carry, put refuses).
    """
    header, body = _body(value)
    digest = xxhash.xxh3_128_hexdigest(body)
    ref_id = str(ULID()).lower()
    prefix = _prefix(header)
    _write_atomically(host_root() / ref_id, prefix, body)
    where = None
    if durable:
        tier = storage if isinstance(storage, Storage) else open_storage(storage)
        with tier.open(f"{STORAGE_PREFIX}/{ref_id}", "wb") as out:  # fsynced when closed
            out.write(prefix)
            out.write(body)
        where = tier.url
    return Ref(
        id=ref_id,
        size=len(body),
        digest=digest,
        kind=header["kind"],
        dtype=header.get("dtype"),
        shape=tuple(header["shape"]) if "shape" in header else None,
        host=host_id(),
        storage=where,
    )


def _body(value: Any) -> tuple[dict[str, Any], memoryview]:
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.ndarray) and _raw_dtype(value.dtype):
        arr = np.ascontiguousarray(value)
        flat = arr.reshape(-1).view(np.uint8)
        header = {"kind": "ndarray", "dtype": arr.dtype.str, "shape": list(arr.shape)}
        return header, memoryview(flat)
    return {"kind": "value"}, memoryview(codec.encode(value))


def _raw_dtype(dtype: Any) -> bool:
    """Plain fixed-size dtypes are laid out raw; objects and structured ones go through the codec
    (which refuses the first and keeps the field names of the second)."""
    return not dtype.hasobject and dtype.names is None and dtype.itemsize > 0


def _prefix(header: dict[str, Any]) -> bytes:
    head: bytes = msgpack.packb(header, use_bin_type=True)
    start = _PREFIX.size + len(head)
    return _PREFIX.pack(MAGIC, len(head)) + head + bytes(-start % ALIGN)


def _write_atomically(path: Path, prefix: bytes, body: memoryview) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as out:
            out.write(prefix)
            out.write(body)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


# -- get ------------------------------------------------------------------------------------------


def get(ref: Ref, *, allow_pickle: bool = False) -> Any:
    """The value `ref` stands for, from the nearest tier that holds it.

    An array comes back as a read-only view over the mapped object (`.copy()` to write). Other
    values are decoded as plain values unless `allow_pickle` (an object, like a result, may have
    been written by any worker of the namespace).
    """
    if not isinstance(ref, Ref):
        raise TypeError(f"dls.get takes a Ref (from dls.put), got {type(ref).__name__}")
    path = host_root() / ref.id
    if not path.exists():
        if ref.storage is None:
            raise NotFound(
                f"object {ref.id} is not on this host ({host_id()}) and has no durable copy: "
                f"it was put with durable=False on host {ref.host}"
            )
        _fetch(ref, path)
    return _load(path, ref, allow_pickle)


def _fetch(ref: Ref, path: Path) -> None:
    """Copy the durable copy into this host's tier, checked before it becomes visible."""
    assert ref.storage is not None
    tmp = path.with_name(f".{path.name}.{os.getpid()}.fetch")
    try:
        source = open_storage(ref.storage).open(f"{STORAGE_PREFIX}/{ref.id}", "rb")
        with source as src, open(tmp, "wb") as out:
            _copy(src, out)
        _load(tmp, ref, allow_pickle=False, check_only=True)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def _copy(src: IO[Any], out: IO[Any], chunk: int = 8 << 20) -> None:
    while block := src.read(chunk):
        out.write(block)


def _load(path: Path, ref: Ref, allow_pickle: bool, *, check_only: bool = False) -> Any:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < _PREFIX.size:
            raise ObjectCorrupt(f"object {ref.id} at {path} is {size} bytes: not an object")
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    view = memoryview(mapped)
    magic, head_len = _PREFIX.unpack_from(view)
    if magic != MAGIC:
        raise ObjectCorrupt(f"object {ref.id} at {path} does not start with {MAGIC!r}")
    start = _PREFIX.size + head_len
    try:
        header = msgpack.unpackb(view[_PREFIX.size : start], raw=False)
    except Exception as exc:
        raise ObjectCorrupt(f"object {ref.id} at {path} has an unreadable header: {exc}") from None
    if not isinstance(header, dict) or header.get("kind") != ref.kind:
        raise ObjectCorrupt(f"object {ref.id} at {path} does not hold a {ref.kind}")
    body = view[start + (-start % ALIGN) :]
    if len(body) != ref.size:
        raise ObjectCorrupt(
            f"object {ref.id} at {path} is truncated or padded: {len(body)} bytes of body, "
            f"its Ref says {ref.size}"
        )
    if xxhash.xxh3_128_hexdigest(body) != ref.digest:
        raise ObjectCorrupt(f"object {ref.id} at {path} does not match its Ref's hash")
    if check_only:
        return None
    if header.get("kind") == "ndarray":
        import numpy as np

        return np.frombuffer(body, dtype=np.dtype(header["dtype"])).reshape(header["shape"])
    return codec.decode(body, allow_pickle=allow_pickle)
