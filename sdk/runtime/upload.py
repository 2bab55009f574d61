"""A bundle sent to a plane: only the blobs the plane lacks, then the manifest that names them.

The plane is asked once which of the bundle's blobs it is missing, so a re-submit after a
one-line edit sends one file; the manifest goes last, since the plane refuses a manifest whose
blobs it does not hold, and a submit refuses a bundle whose manifest it does not hold. A
process remembers the manifests it has put on each plane, so a loop of submits of the same
code costs no round trip after the first.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from typing import Any, Protocol

from dreamlake.lakeshore.errors import InvalidArgument

from .bundle import Bundle

__all__ = ["BlobPlane", "upload"]


class BlobPlane(Protocol):
    """The plane methods a bundle's upload uses (sdk/plane/base.py has them all)."""

    def runtime_missing(self, digests: list[str]) -> list[str]: ...
    def put_runtime_blob(self, digest: str, data: bytes) -> bool: ...
    def put_runtime_manifest(self, manifest: dict[str, Any]) -> str: ...


_lock = threading.Lock()
_put: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


def upload(plane: BlobPlane, bundle: Bundle) -> int:
    """Put `bundle` on `plane` unless this process already did; the number of blobs sent."""
    digest = bundle.manifest.digest
    with _lock:
        if digest in _put.get(plane, ()):
            return 0
    missing = plane.runtime_missing(sorted(bundle.manifest.blobs()))
    for sha in missing:
        plane.put_runtime_blob(sha, _read(bundle, sha))
    plane.put_runtime_manifest(bundle.manifest.to_wire())
    with _lock:
        _put.setdefault(plane, set()).add(digest)
    return len(missing)


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
