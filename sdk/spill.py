"""Spill: payloads and results above the inline limit travel as a `StorageRef`, not as bytes.

Why: the invocation row (and every HTTP hop, and Postgres's TOAST) should carry small values. A
value whose encoding exceeds the inline limit (256 KiB by default; `LAKESHORE_INLINE_LIMIT`, or
`configure(inline_limit=...)`) is written to storage under `_spill/<ulid>` and the wire carries
only the encoded ref, a few dozen bytes. The control plane stores and forwards those bytes like
any payload; it never sees the spilled data.

Both directions are transparent: `SyncQueue.submit` and `ack`, the worker loop and the daemon's
children spill on the way out (`dumps`/`spill`); `result()`, `claim()` and `run_body` resolve on
the way in (`loads`/`resolve`). Only refs under `_spill/` are resolved and, with the
invocation's retention, deleted (`is_spilled`): a `StorageRef` that user code passes on purpose
(a dataset in a bucket) is a value like any other and is never touched.

Where spills go: the storage given to the call, else `configure(storage=...)`, else the job's
storage when inside a running job (`dls.run`), else `$LAKESHORE_STORAGE`, else
`$LAKESHORE_HOME/storage`. A ref names its storage's URL, so a reader needs access, not config.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Final

from ulid import ULID

from . import codec
from .errors import InvalidArgument
from .run import current as current_job
from .storage import Storage, StorageRef
from .storage import storage as open_storage

__all__ = [
    "DEFAULT_INLINE_LIMIT",
    "SPILL_PREFIX",
    "configure",
    "dumps",
    "inline_limit",
    "is_spilled",
    "loads",
    "resolve",
    "spill",
]

#: Encoded values up to this many bytes stay inline on the invocation.
DEFAULT_INLINE_LIMIT: Final = 256 * 1024
#: Spilled objects live under this top-level key prefix, and only those are ever deleted.
SPILL_PREFIX: Final = "_spill/"

_lock = threading.Lock()
_settings: dict[str, Any] = {"inline_limit": None, "storage": None}


def configure(*, inline_limit: int | None = None, storage: str | Storage | None = None) -> None:
    """Set this process's inline limit and spill storage (None: back to the environment)."""
    if inline_limit is not None:
        _check_limit(inline_limit)
    with _lock:
        _settings["inline_limit"] = inline_limit
        _settings["storage"] = storage


def _check_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise InvalidArgument(f"the inline limit is a byte count >= 0, got {limit!r}")
    return limit


def inline_limit() -> int:
    """The limit in force: `configure()`, else `$LAKESHORE_INLINE_LIMIT`, else 256 KiB."""
    configured = _settings["inline_limit"]
    if configured is not None:
        return int(configured)
    text = os.environ.get("LAKESHORE_INLINE_LIMIT")
    if text:
        try:
            return _check_limit(int(text))
        except ValueError:
            raise InvalidArgument(
                f"LAKESHORE_INLINE_LIMIT must be a byte count, got {text!r}"
            ) from None
    return DEFAULT_INLINE_LIMIT


def spill_storage(storage: str | Storage | None = None) -> Storage:
    """Where a spill goes (see the module docstring for the order)."""
    if storage is not None:
        return open_storage(storage)
    configured = _settings["storage"]
    if configured is not None:
        return open_storage(configured)
    job = current_job()
    if job is not None:
        return job.storage
    return open_storage(None)


def spill(data: bytes, *, limit: int | None = None, storage: str | Storage | None = None) -> bytes:
    """`data` itself when it fits the inline limit, else the encoded ref to a spilled copy."""
    if len(data) <= (inline_limit() if limit is None else _check_limit(limit)):
        return data
    target = spill_storage(storage)
    key = f"{SPILL_PREFIX}{str(ULID()).lower()}"
    target.write(key, data)
    return codec.encode(target.ref(key, len(data)))


def dumps(value: Any, *, limit: int | None = None, storage: str | Storage | None = None) -> bytes:
    """`codec.encode(value)`, spilled when too big."""
    return spill(codec.encode(value), limit=limit, storage=storage)


def is_spilled(value: object) -> bool:
    """True for a ref this module wrote (under `_spill/`): one that stands for a value."""
    return isinstance(value, StorageRef) and value.key.startswith(SPILL_PREFIX)


def resolve(value: Any, *, allow_pickle: bool = True) -> Any:
    """The value a spilled ref stands for (read and decoded); any other value unchanged."""
    if is_spilled(value):
        return codec.decode(value.read(), allow_pickle=allow_pickle)
    return value


def loads(data: bytes | bytearray | memoryview, *, allow_pickle: bool = True) -> Any:
    """`codec.decode(data)`, following a spilled ref to the value it stands for."""
    return resolve(codec.decode(data, allow_pickle=allow_pickle), allow_pickle=allow_pickle)


def delete_refs(refs: list[StorageRef]) -> list[str]:
    """Delete spilled objects (retention); returns a line per ref that could not be deleted.

    Best effort by design: the rows are already gone, a failure here only leaves an orphan
    object behind, and storage may be unreachable from where the trim ran.
    """
    problems: list[str] = []
    for ref in refs:
        if not is_spilled(ref):
            continue
        try:
            ref.delete()
        except Exception as exc:
            problems.append(f"{ref.url}/{ref.key}: {exc}")
    return problems
