"""Object storage behind one small interface: a local directory or an S3 bucket.

Why it exists: file bytes never ride the wire. A job body writes what it produces through
`dls.run.write(key, data)` and returns the key; a payload or result too big to keep inline on the
invocation row is spilled here and rides as a `StorageRef` (see `spill.py`). Either way the
control plane only ever sees a short key.

    dls.storage("file:///data/lakeshore")    # a directory (writes: temp file + rename)
    dls.storage("s3://bucket/some/prefix")   # boto3, credentials from the usual AWS env
    dls.storage()                            # $LAKESHORE_STORAGE, else $LAKESHORE_HOME/storage

Keys are relative POSIX paths (`scene7/frame-000.png`): no empty, `.` or `..` segment, no
leading `/`, no backslash or NUL, so a key can never name anything outside its storage root and
means the same thing on disk and in a bucket. boto3 is imported only when an `s3://` storage is
first used: a producer that never spills to S3 never pulls it in (it is the `s3` extra).
"""

from __future__ import annotations

import abc
import contextlib
import io
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final
from urllib.parse import urlparse

import msgpack

from .errors import DispatchError, InvalidArgument, NotFound
from .extras import needs_extra, require
from .ref import EXT_OBJECT_REF, Ref

__all__ = [
    "LocalStorage",
    "S3Storage",
    "Storage",
    "StorageError",
    "StorageRef",
    "check_key",
    "default_storage_url",
    "is_spilled",
    "storage",
]

#: Longest key accepted (S3's own limit is 1024 bytes; a prefix and a scope need room).
MAX_KEY_LENGTH: Final = 768
#: Longest storage URL a `StorageRef` may carry; with the key, a ref always fits the sniff window.
MAX_URL_LENGTH: Final = 1024
#: A `StorageRef` on the wire is never longer than this: what the store reads to find refs.
MAX_REF_BYTES: Final = 2048
#: Where the object store keeps durable copies (objects/): `_objects/<ref id>`.
OBJECTS_PREFIX: Final = "_objects"
#: Storage keys of spilled values: the old spill's prefix and the object store's. Only refs under
#: these are ever resolved or deleted.
SPILL_PREFIX: Final = "_spill/"
SPILLED_PREFIXES: Final = (SPILL_PREFIX, f"{OBJECTS_PREFIX}/")
#: The msgpack ext code of a `StorageRef` (registered in `codec.EXT_TYPES` as "storage_ref").
EXT_STORAGE_REF: Final = 48
#: Chunk size for streaming copies.
CHUNK: Final = 1 << 20


class StorageError(DispatchError):
    """A storage operation failed (permissions, a missing bucket, an unreachable endpoint)."""

    code = "storage_error"


def check_key(key: object) -> str:
    """Validate a storage key; returns it. Raises `InvalidArgument` naming what is wrong."""
    if not isinstance(key, str) or not key:
        raise InvalidArgument(f"a storage key is a non-empty string, got {key!r}")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidArgument(f"storage key is longer than {MAX_KEY_LENGTH} characters")
    if key.startswith("/") or "\\" in key or "\x00" in key:
        raise InvalidArgument(
            f"storage key {key!r} must be a relative path with '/' separators (no leading '/')"
        )
    if any(part in ("", ".", "..") for part in key.split("/")):
        raise InvalidArgument(f"storage key {key!r} has an empty, '.' or '..' segment")
    return key


def join_key(*parts: str) -> str:
    """Join key segments with '/', dropping empty ones (a scope of '' adds nothing)."""
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


# -- refs ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StorageRef:
    """Where some bytes live: a storage URL and a key in it, plus their size.

    The ref carries its storage's URL so that whoever reads it (a worker on another box, a
    producer reading a result) needs no configuration to find the bytes, only access to them.
    """

    url: str
    key: str
    size: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url or len(self.url) > MAX_URL_LENGTH:
            raise InvalidArgument(f"a storage ref's url is 1..{MAX_URL_LENGTH} characters")
        check_key(self.key)
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 0:
            raise InvalidArgument(f"a storage ref's size is an int >= 0, got {self.size!r}")

    def to_wire(self) -> bytes:
        """The ext payload: a msgpack map of plain strings and an int, readable anywhere."""
        data: bytes = msgpack.packb(
            {"url": self.url, "key": self.key, "size": self.size}, use_bin_type=True
        )
        return data

    @classmethod
    def from_wire(cls, data: bytes) -> StorageRef:
        """Parse an ext payload; plain msgpack only (no ext types, so nothing to unpickle)."""
        fields = msgpack.unpackb(data, raw=False, strict_map_key=True)
        if not isinstance(fields, dict) or not {"url", "key"} <= set(fields):
            raise InvalidArgument("a storage ref is a map with 'url' and 'key'")
        return cls(url=fields["url"], key=fields["key"], size=fields.get("size", 0))

    def read(self) -> bytes:
        return storage(self.url).read(self.key)

    def delete(self) -> None:
        storage(self.url).delete(self.key)


# msgpack ext headers: (first byte, offset of the type byte). fixext 1/2/4/8/16, ext 8/16/32.
_EXT_HEADERS: Final = {0xD4: 1, 0xD5: 1, 0xD6: 1, 0xD7: 1, 0xD8: 1, 0xC7: 2, 0xC8: 3, 0xC9: 5}


def sniff_ref(blob: bytes | bytearray | memoryview | None) -> StorageRef | None:
    """The `StorageRef` that `blob` consists of, or None; never decodes anything else.

    This is how the control plane finds spilled bytes to delete with an invocation without
    decoding payloads: a spilled payload is exactly one msgpack ext, of type `EXT_STORAGE_REF` (the
    old spill) or `EXT_OBJECT_REF` with the spilled flag (named by its durable copy's key), which
    its first few bytes say; anything else (or anything malformed) is None.
    """
    if blob is None or not 3 <= len(blob) <= MAX_REF_BYTES:
        return None
    data = bytes(blob)
    offset = _EXT_HEADERS.get(data[0])
    if offset is None or data[offset] not in (EXT_STORAGE_REF, EXT_OBJECT_REF):
        return None
    try:
        ext = msgpack.unpackb(data, raw=False)
        if not isinstance(ext, msgpack.ExtType):
            return None
        if ext.code == EXT_STORAGE_REF:
            return StorageRef.from_wire(ext.data)
        if ext.code == EXT_OBJECT_REF:
            # A spilled object's durable copy, named as the storage key it lives under.
            ref = Ref.from_wire(ext.data)
            if ref.spilled and ref.storage is not None:
                return StorageRef(url=ref.storage, key=f"{OBJECTS_PREFIX}/{ref.id}", size=ref.size)
        return None
    except Exception:
        return None


def is_spilled(value: object) -> bool:
    """True for a spilled `Ref`, or a `StorageRef` under a spill prefix: one that stands for a value
    (and is deleted with its invocation).

    Here beside `sniff_ref`, not in spill.py, so that the store's retention can ask it without
    importing the object store above it (issue 38: the circle plane -> spill -> objects -> plane).
    """
    if isinstance(value, Ref):
        return value.spilled
    return isinstance(value, StorageRef) and value.key.startswith(SPILLED_PREFIXES)


# -- the interface ------------------------------------------------------------------------------


class Storage(abc.ABC):
    """Bytes under keys. Every write is atomic: a reader sees the old object or the new one."""

    #: The URL this storage was opened from; refs carry it.
    url: str

    @abc.abstractmethod
    def read(self, key: str) -> bytes:
        """The object's bytes; `NotFound` if there is none."""

    @abc.abstractmethod
    def write(self, key: str, data: bytes | bytearray | memoryview) -> str:
        """Store `data` at `key` (replacing any object there); returns the key."""

    @abc.abstractmethod
    def open(self, key: str, mode: str = "rb") -> IO[Any]:
        """A stream: 'rb'/'r' read, 'wb'/'w' write (visible only once closed without error)."""

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object; a missing one is not an error (deletes are retried)."""

    @abc.abstractmethod
    def exists(self, key: str) -> bool: ...

    @abc.abstractmethod
    def list(self, prefix: str = "") -> Iterator[str]:
        """Keys under `prefix` (a key prefix, '' for all), in no promised order."""

    def ref(self, key: str, size: int = 0) -> StorageRef:
        return StorageRef(self.url, check_key(key), size)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


def _check_mode(mode: str) -> tuple[bool, bool]:
    """(writing, text) for the modes every storage supports."""
    if mode not in ("r", "rb", "w", "wb"):
        raise InvalidArgument(f"storage open mode must be r, rb, w or wb, got {mode!r}")
    return mode.startswith("w"), "b" not in mode


# -- local directory ----------------------------------------------------------------------------


class LocalStorage(Storage):
    """A directory: objects are files, written to a temp file beside the target and renamed.

    The rename is atomic on POSIX, so a concurrent reader (or a crash mid-write) never sees a
    torn object; the file is fsynced first, so a spilled payload survives a power cut once the
    submit that references it has returned.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().absolute()
        self.url = self.root.as_uri()

    def path(self, key: str) -> Path:
        return self.root.joinpath(*check_key(key).split("/"))

    def read(self, key: str) -> bytes:
        try:
            return self.path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            raise NotFound(f"no object '{key}' in {self.url}") from None
        except OSError as exc:
            raise StorageError(f"cannot read '{key}' from {self.url}: {exc}") from exc

    def write(self, key: str, data: bytes | bytearray | memoryview) -> str:
        with _LocalWriter(self, key) as out:
            out.write(data)
        return key

    def open(self, key: str, mode: str = "rb") -> IO[Any]:
        writing, text = _check_mode(mode)
        if writing:
            return _writer(_LocalWriter(self, key), text)
        try:
            stream: IO[bytes] = self.path(key).open("rb")
        except (FileNotFoundError, NotADirectoryError):
            raise NotFound(f"no object '{key}' in {self.url}") from None
        return io.TextIOWrapper(stream, encoding="utf-8") if text else stream

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            self.path(key).unlink()

    def exists(self, key: str) -> bool:
        return self.path(key).is_file()

    def list(self, prefix: str = "") -> Iterator[str]:
        if not self.root.is_dir():
            return
        for dirpath, _dirs, files in os.walk(self.root):
            rel = Path(dirpath).relative_to(self.root).as_posix()
            for name in files:
                if name.startswith(".") and name.endswith(".tmp"):
                    continue  # a write in progress
                key = name if rel == "." else f"{rel}/{name}"
                if key.startswith(prefix):
                    yield key


class _Writer(io.BufferedIOBase):
    """A write stream that becomes the object only when closed cleanly.

    Leaving a `with` block by an exception (or calling `abort()`) drops what was written and
    leaves any previous object in place: a half-written output never appears under its key.
    """

    def __init__(self) -> None:
        super().__init__()
        self._failed = False

    def writable(self) -> bool:
        return True

    def abort(self) -> None:
        self._failed = True
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        try:
            self._finish(commit=not self._failed)
        finally:
            super().close()

    @abc.abstractmethod
    def _finish(self, commit: bool) -> None:
        """Make the written bytes the object (commit) or drop them."""

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self._failed = True
        self.close()


class _TextWriter(io.TextIOWrapper):
    """Text mode over a `_Writer`, keeping its abort-on-exception rule."""

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self.buffer._failed = True  # type: ignore[attr-defined]
        self.close()


def _writer(raw: _Writer, text: bool) -> IO[Any]:
    if text:
        return _TextWriter(raw, encoding="utf-8")  # type: ignore[arg-type]
    return raw  # type: ignore[return-value]


class _LocalWriter(_Writer):
    """Writes to a temp file beside the target; fsync and rename on commit, unlink on abort."""

    def __init__(self, storage: LocalStorage, key: str) -> None:
        super().__init__()
        self._key = key
        self._url = storage.url
        self._target = storage.path(key)
        import tempfile  # a writer's import, not the SDK's

        try:
            self._target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, self._tmp = tempfile.mkstemp(  # mode 0600
                prefix=f".{self._target.name}.", suffix=".tmp", dir=self._target.parent
            )
        except OSError as exc:
            raise StorageError(f"cannot write '{key}' to {self._url}: {exc}") from exc
        self._out = os.fdopen(fd, "wb")

    def write(self, data: Any) -> int:
        try:
            return self._out.write(data)
        except OSError as exc:
            self._failed = True
            raise StorageError(f"cannot write '{self._key}' to {self._url}: {exc}") from exc

    def _finish(self, commit: bool) -> None:
        try:
            if commit:
                self._out.flush()
                os.fsync(self._out.fileno())
            self._out.close()
            if commit:
                os.replace(self._tmp, self._target)
        except OSError as exc:
            commit = False
            raise StorageError(f"cannot write '{self._key}' to {self._url}: {exc}") from exc
        finally:
            if not commit:
                with contextlib.suppress(OSError):
                    os.unlink(self._tmp)


# -- S3 -----------------------------------------------------------------------------------------


class S3Storage(Storage):
    """`s3://bucket/prefix` through boto3; MinIO and other S3 servers via AWS_ENDPOINT_URL.

    A PUT is atomic in S3 (readers see the old object or the new one), so no temp-and-rename is
    needed. Streams: reads stream the object body; writes spool to a temp file (memory first)
    and upload on close, multipart when large.
    """

    def __init__(self, bucket: str, prefix: str = "", *, client: Any = None) -> None:
        if not bucket:
            raise InvalidArgument("an s3:// storage URL needs a bucket: s3://bucket/prefix")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self._client = client
        self._lock = threading.Lock()
        if client is None:  # refuse now, at the command line, not in the first job that spills
            require("boto3", "s3:// storage")

    @property
    def client(self) -> Any:
        """The boto3 client, made on first use (boto3 is optional: the `s3` extra)."""
        with self._lock:
            if self._client is None:
                self._client = _s3_client()
            return self._client

    def _key(self, key: str) -> str:
        return join_key(self.prefix, check_key(key))

    def _fail(self, what: str, key: str, exc: Exception) -> DispatchError:
        code = getattr(exc, "response", {}).get("Error", {}).get("Code")
        if code in ("NoSuchKey", "404", "NotFound"):
            return NotFound(f"no object '{key}' in {self.url}")
        return StorageError(f"cannot {what} '{key}' in {self.url}: {exc}")

    def read(self, key: str) -> bytes:
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"]
            with contextlib.closing(body):
                data: bytes = body.read()
            return data
        except Exception as exc:
            raise self._fail("read", key, exc) from exc

    def write(self, key: str, data: bytes | bytearray | memoryview) -> str:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=bytes(data))
        except Exception as exc:
            raise self._fail("write", key, exc) from exc
        return key

    def open(self, key: str, mode: str = "rb") -> IO[Any]:
        writing, text = _check_mode(mode)
        if writing:
            return _writer(_S3Writer(self, key), text)
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"]
        except Exception as exc:
            raise self._fail("read", key, exc) from exc
        stream = io.BufferedReader(_BodyReader(body), CHUNK)
        return io.TextIOWrapper(stream, encoding="utf-8") if text else stream

    def delete(self, key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
        except Exception as exc:
            error = self._fail("delete", key, exc)
            if not isinstance(error, NotFound):
                raise error from exc

    def exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except Exception as exc:
            if isinstance(self._fail("head", key, exc), NotFound):
                return False
            raise self._fail("head", key, exc) from exc
        return True

    def list(self, prefix: str = "") -> Iterator[str]:
        full = join_key(self.prefix, prefix) if prefix else self.prefix
        if full and (prefix.endswith("/") or not prefix):
            full += "/"
        strip = len(self.prefix) + 1 if self.prefix else 0
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=full):
            for obj in page.get("Contents", ()):
                yield obj["Key"][strip:]


class _BodyReader(io.RawIOBase):
    """botocore's StreamingBody as a raw stream, so `io.BufferedReader` can wrap it."""

    def __init__(self, body: Any) -> None:
        super().__init__()
        self._body = body

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        chunk = self._body.read(len(buffer))
        buffer[: len(chunk)] = chunk
        return len(chunk)

    def close(self) -> None:
        if not self.closed:
            self._body.close()
        super().close()


class _S3Writer(_Writer):
    """Spools locally, uploads on commit (upload_fileobj goes multipart when large)."""

    def __init__(self, storage: S3Storage, key: str) -> None:
        super().__init__()
        self._storage = storage
        self._key = key
        import tempfile

        self._spool = tempfile.SpooledTemporaryFile(max_size=8 * CHUNK)  # noqa: SIM115

    def write(self, data: Any) -> int:
        return self._spool.write(data)

    def _finish(self, commit: bool) -> None:
        s = self._storage
        try:
            if commit:
                self._spool.seek(0)
                try:
                    s.client.upload_fileobj(self._spool, s.bucket, s._key(self._key))
                except Exception as exc:
                    raise s._fail("write", self._key, exc) from exc
        finally:
            self._spool.close()


def _s3_client() -> Any:
    with needs_extra("s3:// storage"):
        import boto3  # type: ignore[import-untyped]  # the s3 extra
    # Recent boto3 reads AWS_ENDPOINT_URL itself; passing it keeps older ones working too.
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    return boto3.session.Session().client("s3", endpoint_url=endpoint or None)


# -- opening by URL -----------------------------------------------------------------------------

_cache_lock = threading.Lock()
_cache: dict[str, Storage] = {}


def default_storage_url() -> str:
    """`$LAKESHORE_STORAGE` (the daemon's --storage reaches its jobs this way), else the
    directory `storage` under `$LAKESHORE_HOME` (`~/.lakeshore`), which every process on the
    box shares just as it shares the embedded plane."""
    url = os.environ.get("LAKESHORE_STORAGE")
    if url:
        return url
    from .home import home

    return (home().absolute() / "storage").as_uri()


def open_storage(url: str) -> Storage:
    """A new storage for `url` (uncached): file:///dir, a plain path, or s3://bucket/prefix."""
    if not isinstance(url, str) or not url:
        raise InvalidArgument(f"a storage URL is a non-empty string, got {url!r}")
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        return S3Storage(parsed.netloc, parsed.path)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise InvalidArgument(f"a file:// storage URL names a local path, got {url!r}")
        from urllib.request import url2pathname

        return LocalStorage(url2pathname(parsed.path))
    if parsed.scheme == "" or (len(parsed.scheme) == 1 and os.name == "nt"):
        return LocalStorage(url)
    raise InvalidArgument(f"unknown storage URL {url!r}: use file:///dir or s3://bucket/prefix")


def storage(url: str | Storage | None = None) -> Storage:
    """The storage at `url` (default: `default_storage_url()`), one instance per URL.

    Cached so that a process reuses one boto3 client (and its connection pool) per bucket.
    """
    if isinstance(url, Storage):
        return url
    target = url or default_storage_url()
    with _cache_lock:
        found = _cache.get(target)
        if found is None:
            found = _cache[target] = open_storage(target)
        return found


def reset_storage_cache() -> None:
    """Forget cached storages (tests that change AWS or LAKESHORE_* environment)."""
    with _cache_lock:
        _cache.clear()
