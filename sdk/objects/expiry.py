"""Deleting the durable copies of objects whose time to live ran out (`dls.put(..., ttl_s=)`).

Why a sweep reads headers: an object's expiry is written in its own header (layout.py), so it
needs no second record that could disagree with the bytes or be lost between two writes, and a
copy in any tier (a file, an S3 object, a control plane's storage) carries it. The price is one
short read per object per sweep; sweeps run with retention (the server's timer, `lakeshore
queues prune`), not on any request's path. Spilled objects have no expiry: retention deletes
them with the invocation that carries them.
"""

from __future__ import annotations

import re
import time
from typing import Any, Final

import msgpack

from dreamlake.lakeshore.errors import DispatchError
from dreamlake.lakeshore.storage import OBJECTS_PREFIX, Storage

from .layout import MAGIC, PREFIX

__all__ = ["expires_at", "sweep"]

_NAME: Final = re.compile(r"[0-9a-z]{26}")
#: A header is a few hundred bytes; one larger than this is not one of ours.
_MAX_HEADER: Final = 64 << 10


def expires_at(storage: Storage, key: str) -> float | None:
    """The expiry the object at `key` carries; None when it has none or is not an object."""
    with storage.open(key, "rb") as src:
        head = src.read(PREFIX.size)
        if len(head) < PREFIX.size:
            return None
        magic, length = PREFIX.unpack(head)
        if magic != MAGIC or length > _MAX_HEADER:
            return None
        try:
            header: Any = msgpack.unpackb(src.read(length), raw=False)
        except Exception:
            return None
    expires = header.get("expires") if isinstance(header, dict) else None
    if isinstance(expires, bool) or not isinstance(expires, int | float):
        return None
    return float(expires)


def sweep(storage: Storage, prefix: str = f"{OBJECTS_PREFIX}/", now: float | None = None) -> int:
    """Delete the objects under `prefix` in `storage` whose expiry has passed; how many went.

    Best effort, as retention is: an object that cannot be read or deleted now is left for the
    next sweep (its readers already get `NotFound` from the expiry in their Ref).
    """
    now = time.time() if now is None else now
    deleted = 0
    for key in list(storage.list(prefix)):
        if not _NAME.fullmatch(key.rpartition("/")[2]):
            continue  # a temporary file of an upload in flight, or not an object
        try:
            expires = expires_at(storage, key)
            if expires is not None and expires <= now:
                storage.delete(key)
                deleted += 1
        except (DispatchError, OSError):
            continue
    return deleted
