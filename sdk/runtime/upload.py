"""A bundle sent to a plane: only the blobs the plane lacks, then the manifest that names them.

The plane is asked once which of the bundle's blobs it is missing, so a re-submit after a
one-line edit sends one file; those go in batches of up to `BATCH_BYTES` (one commit, one fsync
each: 2,000 small files are a few requests, not 2,000); the manifest goes last, since the plane
refuses a manifest whose blobs it does not hold, and a submit refuses a bundle whose manifest it
does not hold. A process remembers the manifests it has put on each plane for `REMEMBER_S`, so
a loop of submits of the same code costs no round trip after the first; well inside the
plane's grace before retention may remove a bundle no job names.
"""

from __future__ import annotations

import hashlib
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, Final, Protocol

from dreamlake.lakeshore.errors import InvalidArgument

from .bundle import Bundle

__all__ = ["BATCH_BYTES", "BlobPlane", "upload"]

#: Most bytes of blobs per request (a server's body limit is 64 MiB by default).
BATCH_BYTES: Final = 16 << 20
#: Most blobs per request.
BATCH_BLOBS: Final = 1000
#: How long a put bundle is trusted to be still on its plane without asking.
REMEMBER_S: Final = 3600.0


class BlobPlane(Protocol):
    """The plane methods a bundle's upload uses (sdk/plane/base.py has them all)."""

    def runtime_missing(self, shas: Sequence[str]) -> list[str]: ...
    def put_runtime_blobs(self, blobs: Sequence[tuple[str, bytes]]) -> int: ...
    def put_runtime_manifest(self, manifest: dict[str, Any]) -> str: ...


_lock = threading.Lock()
_put: weakref.WeakKeyDictionary[Any, dict[str, float]] = weakref.WeakKeyDictionary()


def upload(plane: BlobPlane, bundle: Bundle) -> int:
    """Put `bundle` on `plane` unless this process did lately; the number of blobs sent."""
    digest = bundle.manifest.digest
    now = time.monotonic()
    with _lock:
        if now - _put.get(plane, {}).get(digest, -REMEMBER_S) < REMEMBER_S:
            return 0
    missing = plane.runtime_missing(sorted(bundle.manifest.blobs()))
    for batch in _batches(bundle, missing):
        plane.put_runtime_blobs(batch)
    plane.put_runtime_manifest(bundle.manifest.to_wire())
    with _lock:
        _put.setdefault(plane, {})[digest] = now
    return len(missing)


def _batches(bundle: Bundle, shas: list[str]) -> Iterator[list[tuple[str, bytes]]]:
    """`shas`' bytes in batches of at most BATCH_BYTES (a bigger file goes alone)."""
    batch: list[tuple[str, bytes]] = []
    size = 0
    for sha in shas:
        data = _read(bundle, sha)
        if batch and (size + len(data) > BATCH_BYTES or len(batch) >= BATCH_BLOBS):
            yield batch
            batch, size = [], 0
        batch.append((sha, data))
        size += len(data)
    if batch:
        yield batch


def _read(bundle: Bundle, sha: str) -> bytes:
    """The blob's bytes, checked: a file edited between the scan and the upload is refused
    rather than stored under the hash of what it was."""
    path = bundle.files[sha]
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != sha:
        raise InvalidArgument(
            f"{path} changed while the job's runtime was being sent; submit again"
        )
    return data
