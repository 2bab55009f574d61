"""The object store: `dls.put(value)` returns a `Ref`, `dls.get(ref)` the value, in tiers.

Why: ML work moves arrays, and a queue that serialises every argument and result through every
hop loses to Ray by an order of magnitude on them. An object is written once; what travels is its
Ref (a few hundred bytes), and a reader on the same box maps the bytes instead of copying them.

Tiers, nearest first:
    host     every process on the box shares it: an arena in tmpfs under /dev/shm where there is
             one (`/dev/shm/lakeshore-<uid>/<host>`), else under `$LAKESHORE_HOME/objects/<host>`
             (`LAKESHORE_OBJECTS` overrides), mapped once per process (see arena.py). Objects
             the arena cannot take (too big, or everything else pinned) are files on disk under
             `$LAKESHORE_HOME/objects/<host>`, deleted after `LAKESHORE_OBJECTS_TTL_S` unread.
             Not durable: tmpfs is gone on reboot, and an object with no durable copy lives
             while the arena has room for it.
    plane    the control plane's storage, through `PUT`/`GET .../objects/{id}` (plane.py):
             for hosts that share only the control plane. Written through (the server fsyncs
             it) before `put` returns; a reader with a token for that plane fetches it into its
             own host tier. An HTTP deployment's durable copies go here unless storage is
             configured (plane.py says the rule).
    storage  the storage tier (`file://` or `s3://`, as `dls.storage`): written through and
             fsynced before `put` returns unless `durable=False`; any box with access reads it
             and keeps a copy in its own host tier.

Every read checks the body's size and xxh3-128 hash against the Ref (layout.py): a truncated or
corrupt copy is `ObjectCorrupt`, never a wrong array. An array comes back as a read-only view
over the host tier's memory; putting that same view again returns its Ref without a copy, so a
job that hands its input on moves no bytes.

A torch CPU tensor is laid out raw like an array and comes back as a tensor over the same memory
(torch has no read-only tensors: `.clone()` one before writing to it in place).
"""

from __future__ import annotations

import contextlib
import enum
import mmap
import os
import re
import socket
import threading
import time
import weakref
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

from ulid import ULID

from dreamlake.lakeshore.errors import InvalidArgument, NotFound
from dreamlake.lakeshore.home import home
from dreamlake.lakeshore.plane.default import default_plane
from dreamlake.lakeshore.plane.env import env_url
from dreamlake.lakeshore.ref import Ref
from dreamlake.lakeshore.storage import OBJECTS_PREFIX, Storage
from dreamlake.lakeshore.storage import storage as open_storage

from . import layout
from .layout import ObjectCorrupt, body_of, checked_body, digest_of, prefix_of, value_of
from .plane import PlaneTier, is_plane_url
from .plane import durable_target as _durable_target
from .plane import tier_for as _tier_for

if TYPE_CHECKING:
    from .arena import Arena

__all__ = [
    "ObjectCorrupt",
    "PlaneTier",
    "Ref",
    "durable_target",
    "get",
    "host_id",
    "host_root",
    "layout",
    "put",
    "put_encoded",
]

#: Where durable copies live in the storage tier.
STORAGE_PREFIX: Final = OBJECTS_PREFIX
#: How long an object kept as a file (not in the arena) lives unread, by default.
DEFAULT_TTL_S: Final = 86400.0
#: How long the durable copies of an object `put` by hand live, by default: a week.
DEFAULT_PUT_TTL_S: Final = 7 * 86400.0


class _Default(enum.Enum):
    TTL = "LAKESHORE_PUT_TTL_S, else a week"


def put_ttl_s() -> float:
    """`LAKESHORE_PUT_TTL_S`, else a week: how long a hand-put object's durable copies live."""
    text = os.environ.get("LAKESHORE_PUT_TTL_S")
    if not text:
        return DEFAULT_PUT_TTL_S
    return _check_ttl(text, "LAKESHORE_PUT_TTL_S")


def _check_ttl(value: object, name: str) -> float:
    try:
        ttl = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        ttl = -1.0
    if isinstance(value, bool) or not 0 < ttl < 1e10:
        raise InvalidArgument(f"{name} is a number of seconds > 0 (or None: never), got {value!r}")
    return ttl


_HOST_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


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


def host_arena() -> Arena:
    # The arena's index is SQLite: loaded by the first object put or read on this host, not by
    # every process that imports the object store (an HTTP producer's verbs import it).
    from .arena import arena_at

    return arena_at(host_root())


def file_root() -> Path:
    """Where this host keeps objects the arena cannot take (too big, or all else pinned): on
    disk under `$LAKESHORE_HOME/objects/<host>`, so the arena's cap bounds the memory used."""
    root = home() / "objects" / host_id()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    return root


def ttl_s() -> float:
    """How long an object kept as a file lives unread: `LAKESHORE_OBJECTS_TTL_S`, else a day."""
    text = os.environ.get("LAKESHORE_OBJECTS_TTL_S")
    if not text:
        return DEFAULT_TTL_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise InvalidArgument(f"LAKESHORE_OBJECTS_TTL_S is a number of seconds >= 0, got {text!r}")
    return value


def _expire_files(root: Path) -> None:
    """Delete file objects nobody read for `ttl_s()`. A reader that mapped one keeps its view:
    unlinking a mapped file frees it only when the mapping goes."""
    before = time.time() - ttl_s()
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.name.startswith("."):
                continue
            with contextlib.suppress(OSError):
                if entry.stat().st_mtime < before:
                    os.unlink(entry.path)


# -- put ------------------------------------------------------------------------------------------


def process_plane() -> Any:
    """The process default plane when it is over HTTP (`LAKESHORE_URL`), else None: the caller's
    plane for a `put`, `get` or spill that no queue verb wraps in `plane.using`. Resolved here,
    by the object store's entry points, and passed down: the plane tier never opens a plane."""
    return default_plane() if env_url() else None


def durable_target(
    storage: str | Storage | PlaneTier | None, via: Any = None
) -> Storage | PlaneTier:
    """Where a durable copy goes (plane.py's rule), this process's default plane included."""
    return _durable_target(storage, via, process_plane)


def put(
    value: Any,
    *,
    durable: bool = True,
    ttl_s: float | _Default | None = _Default.TTL,
    storage: str | Storage | PlaneTier | None = None,
    via: Any = None,
    spilled: bool = False,
) -> Ref:
    """Store `value` and return its Ref; durable (storage tier, fsynced) unless `durable=False`.

    No invocation owns an object put by hand, so it expires: `ttl_s` after the put (by default
    `LAKESHORE_PUT_TTL_S`, else a week; None: never) readers get `NotFound` saying so, and the
    retention sweeps delete its durable copies. A spilled object has no expiry: it lives as long
    as the invocation that carries it.

    `via` (an `HttpDispatch`) sends the durable copy up through that control plane (the plane
    tier), for readers on hosts that share nothing else with this one; without `storage` or
    `via`, an HTTP deployment with no storage configured does so too (plane.py's rule).

    A numpy array or torch CPU tensor is stored as its raw buffer (one copy only if it is not
    C-contiguous); any other value as its codec encoding (`dls.encode`'s rules: what it cannot
    carry, put refuses).
    `spilled` marks a Ref that stands in for a payload or result too big to ride inline (spill.py):
    readers resolve it to its value, and retention deletes it with its invocation.
    """
    if spilled:
        expires = None
    else:
        ttl = put_ttl_s() if isinstance(ttl_s, _Default) else ttl_s
        expires = None if ttl is None else time.time() + _check_ttl(ttl, "ttl_s")
    known = _handed_out(value)
    if known is not None and (known.durable or not durable) and known.spilled == spilled:
        return known
    header, body = body_of(value)
    if expires is not None:
        header["expires"] = expires
    return _store(header, body, durable=durable, storage=storage, via=via, spilled=spilled)


def put_encoded(
    data: bytes,
    *,
    durable: bool = True,
    storage: str | Storage | PlaneTier | None = None,
    spilled: bool,
) -> Ref:
    """`put` of a value already encoded by the codec (spill: no second encoding); an object
    that is not spilled gets the default time to live, as `put`'s."""
    header: dict[str, Any] = {"kind": "value"}
    if not spilled:
        header["expires"] = time.time() + put_ttl_s()
    return _store(header, memoryview(data), durable=durable, storage=storage, spilled=spilled)


def _store(
    header: dict[str, Any],
    body: memoryview,
    *,
    durable: bool,
    storage: str | Storage | PlaneTier | None,
    spilled: bool,
    via: Any = None,
) -> Ref:
    tier = durable_target(storage, via) if durable else None  # a bad target: nothing written
    ref_id = str(ULID()).lower()
    prefix = prefix_of(header)
    arena = host_arena()
    off = arena.reserve(ref_id, len(prefix) + body.nbytes, durable=durable)
    if off is None:
        digest = digest_of(body)
        root = file_root()
        _expire_files(root)
        _write_file(root / ref_id, prefix, body)
    else:
        try:
            digest = arena.write_hashing(off, prefix, body)
        except BaseException:
            arena.discard(ref_id)
            raise
        arena.seal(ref_id)
    where = None
    if tier is not None:
        try:
            where = _write_durable(tier, ref_id, prefix, body, digest)
        except BaseException:  # a put that raised leaves no copy behind on this host either
            if not arena.remove(ref_id):
                with contextlib.suppress(OSError):
                    os.unlink(file_root() / ref_id)
            raise
    return Ref(
        id=ref_id,
        size=body.nbytes,
        digest=digest,
        kind=header["kind"],
        dtype=header.get("dtype"),
        shape=tuple(header["shape"]) if "shape" in header else None,
        host=host_id(),
        storage=where,
        spilled=spilled,
        expires=header.get("expires"),
    )


def _write_durable(
    tier: Storage | PlaneTier, ref_id: str, prefix: bytes, body: memoryview, digest: str
) -> str:
    """Write the durable copy; returns the URL the Ref names it by."""
    if isinstance(tier, PlaneTier):
        tier.upload(ref_id, prefix, body, digest)  # the server checks and fsyncs it
    else:
        with tier.open(f"{STORAGE_PREFIX}/{ref_id}", "wb") as out:  # fsynced when closed
            out.write(prefix)
            out.write(body)
    return tier.url


def _write_file(path: Path, prefix: bytes, body: memoryview) -> None:
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


def get(ref: Ref, *, allow_pickle: bool = False, via: Any = None) -> Any:
    """The value `ref` stands for, from the nearest tier that holds it.

    An array comes back as a read-only view over the host tier (`.copy()` to write). Other
    values are decoded as plain values unless `allow_pickle` (an object, like a result, may have
    been written by any worker of the namespace). `via` (an `HttpDispatch`) is the plane whose
    token reads a plane-tier copy; by default the caller's (plane.py).
    """
    if not isinstance(ref, Ref):
        raise TypeError(f"dls.get takes a Ref (from dls.put), got {type(ref).__name__}")
    if ref.expires is not None and ref.expires <= time.time():
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ref.expires))
        raise NotFound(
            f"object {ref.id} expired at {when}: it was put with a time to live "
            "(dls.put(..., ttl_s=SECONDS), LAKESHORE_PUT_TTL_S); put it again, with ttl_s=None "
            "to keep it until deleted"
        )
    arena = host_arena()
    value = _from_arena(arena, ref, allow_pickle)
    if value is not _ABSENT:
        return value
    path = file_root() / ref.id
    if path.exists():
        os.utime(path)  # read: its time to live starts again
        return _from_file(path, ref, allow_pickle)
    if ref.storage is None:
        if ref.host == host_id() and arena.was_evicted(ref.id):
            raise NotFound(
                f"object {ref.id} was evicted from this host's tier to make room: it was put "
                "with durable=False, which lives while the tier has room (LAKESHORE_OBJECTS_CAP"
                f" = {arena.capacity} bytes); put it durable to keep it"
            )
        raise NotFound(
            f"object {ref.id} is not on this host ({host_id()}) and has no durable copy: "
            f"it was put with durable=False on host {ref.host}"
        )
    _fetch(arena, ref, via)
    value = _from_arena(arena, ref, allow_pickle)
    return _from_file(file_root() / ref.id, ref, allow_pickle) if value is _ABSENT else value


_ABSENT: Final = object()


def _from_arena(arena: Arena, ref: Ref, allow_pickle: bool) -> Any:
    opened = arena.open(ref.id)
    if opened is None:
        return _ABSENT
    view, release = opened
    try:
        header, body = checked_body(view, ref, f"{arena.path} (object {ref.id})")
    except BaseException:
        release()
        raise
    value = value_of(header, body, allow_pickle=allow_pickle, on_release=release)
    _remember(value, ref)
    return value


def _from_file(path: Path, ref: Ref, allow_pickle: bool) -> Any:
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    header, body = checked_body(memoryview(mapped), ref, str(path))
    value = value_of(header, body, allow_pickle=allow_pickle)
    _remember(value, ref)
    return value


def _fetch(arena: Arena, ref: Ref, via: Any = None) -> None:
    """Copy the durable copy into this host's tier, checked before any reader can see it.

    Into the arena when it has room (the header is rebuilt from the Ref to know the size before
    reading), else into a file; either way nothing is visible until the hash has been checked.
    """
    assert ref.storage is not None
    header: dict[str, Any] = {"kind": ref.kind}
    if ref.dtype is not None:
        header |= {"dtype": ref.dtype, "shape": list(ref.shape or ())}
    if ref.expires is not None:
        header["expires"] = ref.expires
    size = len(prefix_of(header)) + ref.size
    source = _open_durable(ref, via)
    off = arena.reserve(ref.id, size, durable=True)
    if off is None:
        with source as src:
            _fetch_to_file(src, ref, file_root() / ref.id)
        return
    try:
        with source as src:
            window = arena.window(off, size)
            got = _read_into(src, window)
            if got != size or src.read(1):
                raise ObjectCorrupt(
                    f"object {ref.id} in {ref.storage} is not {size} bytes: truncated or padded"
                )
            checked_body(window, ref, f"{ref.storage}/{STORAGE_PREFIX}/{ref.id}")
    except BaseException:
        arena.discard(ref.id)
        raise
    arena.seal(ref.id)


def _open_durable(ref: Ref, via: Any) -> IO[Any]:
    """A stream of the durable copy, from the plane tier or the storage tier."""
    assert ref.storage is not None
    if is_plane_url(ref.storage):
        return _tier_for(ref.storage, via, process_plane).open(ref.id)
    return open_storage(ref.storage).open(f"{STORAGE_PREFIX}/{ref.id}", "rb")


def _read_into(src: IO[Any], window: memoryview, chunk: int = 8 << 20) -> int:
    """Fill `window` from `src`; straight into it where the stream can (`readinto`)."""
    readinto = getattr(src, "readinto", None)
    got = 0
    while got < len(window):
        part = window[got : got + min(chunk, len(window) - got)]
        if readinto is not None:
            n = readinto(part)
        else:
            block = src.read(len(part))
            n = len(block)
            part[:n] = block
        if not n:
            break
        got += n
    return got


def _fetch_to_file(src: IO[Any], ref: Ref, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.fetch")
    try:
        with open(tmp, "wb") as out:
            while block := src.read(8 << 20):
                out.write(block)
        with open(tmp, "rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        checked_body(memoryview(mapped), ref, f"{ref.storage}/{STORAGE_PREFIX}/{ref.id}")
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


# -- arrays this process handed out -------------------------------------------------------------

#: id() of an array `get` returned -> (a weak reference to it, its Ref). Putting the same array
#: back (a job returning its input) then costs nothing: the object already exists.
_handed: dict[int, tuple[weakref.ref[Any], Ref]] = {}
_handed_lock = threading.Lock()


def _remember(value: Any, ref: Ref) -> None:
    if ref.kind == "value":
        return
    key = id(value)
    with _handed_lock:
        _handed[key] = (weakref.ref(value), ref)
    weakref.finalize(value, _forget, key)


def _forget(key: int) -> None:
    with _handed_lock:
        _handed.pop(key, None)


def _handed_out(value: Any) -> Ref | None:
    entry = _handed.get(id(value))
    if entry is None or entry[0]() is not value:
        return None
    return entry[1]
