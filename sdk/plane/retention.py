"""Retention: trim the journals, then the rows, of invocations that ended long ago.

Why: every invocation leaves a row and usually a journal, and a busy queue makes millions. The
journal is derived data (the row is the truth), so it goes first and sooner (default 7 days after
the invocation ended); the row goes later (default 30 days). A stream of a trimmed journal
degrades to the terminal result (`topic.iter_frames`), never to a wrong state. Live invocations
are never touched, whatever their age, and neither are topics.

Spilled payloads and results (`spill.py`) are deleted with their invocation. The store cannot
delete them itself (it may not reach the storage, and it never decodes payloads), so it finds
them by the shape of the bytes (`storage.sniff_ref`: only short blobs that are exactly one
storage-ref ext are looked at) and returns them; whoever runs the trim deletes them
(`spill.delete_refs`): the server's retention task, `lakeshore queues prune`, or
`dreamlake.lakeshore.retention.trim`.

Work is done in batches, a transaction each, so a first trim of a long history never holds the
write lock for long.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from ..errors import InvalidArgument
from ..spill import is_spilled
from ..storage import MAX_REF_BYTES, StorageRef, sniff_ref

if TYPE_CHECKING:
    from .store import SqlStore

#: Defaults for the server's retention task (`lakeshore server --retain-*`).
DEFAULT_RETAIN_FRAMES_S: Final = 7 * 86400.0
DEFAULT_RETAIN_INVOCATIONS_S: Final = 30 * 86400.0
#: Rows per transaction.
BATCH: Final = 1000


@dataclass
class Trimmed:
    """What one trim removed, and the spilled objects its caller should delete."""

    frames: int = 0
    invocations: int = 0
    refs: list[StorageRef] = field(default_factory=list)

    def add(self, other: Trimmed) -> None:
        self.frames += other.frames
        self.invocations += other.invocations
        self.refs.extend(other.refs)

    def public(self) -> dict[str, Any]:
        return {
            "frames": self.frames,
            "invocations": self.invocations,
            "refs": [{"url": r.url, "key": r.key, "size": r.size} for r in self.refs],
        }

    @classmethod
    def from_public(cls, data: dict[str, Any]) -> Trimmed:
        return cls(
            frames=int(data.get("frames", 0)),
            invocations=int(data.get("invocations", 0)),
            refs=[StorageRef(r["url"], r["key"], int(r.get("size", 0))) for r in data["refs"]],
        )


def check_age(name: str, value: object) -> float | None:
    """An age in seconds (>= 0), or None for "do not trim this"."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise InvalidArgument(f"{name} must be a number of seconds >= 0, got {value!r}")
    return float(value)


def trim(
    store: SqlStore,
    *,
    frames_older_than_s: float | None = None,
    invocations_older_than_s: float | None = None,
    namespace: str | None = None,
    now: float | None = None,
    batch: int = BATCH,
) -> Trimmed:
    """Trim `namespace` (None: every namespace) as the ages say; see the module docstring."""
    frames_age = check_age("frames_older_than_s", frames_older_than_s)
    rows_age = check_age("invocations_older_than_s", invocations_older_than_s)
    now = time.time() if now is None else now
    if namespace is None:
        with store.connector.transaction(write=False) as tx:
            namespaces = [r["name"] for r in tx.all("retention_namespaces")]
    else:
        namespaces = [namespace]
    done = Trimmed()
    for ns in namespaces:
        if rows_age is not None:
            done.add(_trim_rows(store, ns, now - rows_age, batch))
        if frames_age is not None:
            done.frames += _trim_frames(store, ns, now - frames_age, batch)
    return done


def _trim_frames(store: SqlStore, ns: str, cutoff: float, batch: int) -> int:
    total = 0
    while True:
        with store.connector.transaction() as tx:
            n = len(tx.all("retention_trim_frames", ns=ns, cutoff=cutoff, limit=batch))
        total += n
        if n < batch:
            return total


def _trim_rows(store: SqlStore, ns: str, cutoff: float, batch: int) -> Trimmed:
    done = Trimmed()
    while True:
        with store.connector.transaction() as tx:
            rows = tx.all(
                "retention_old_invocations",
                ns=ns,
                cutoff=cutoff,
                limit=batch,
                ref_bytes=MAX_REF_BYTES,
            )
            if not rows:
                return done
            ids = [r["id"] for r in rows]
            done.frames += len(tx.all("retention_delete_frames_of", ids=ids))
            done.invocations += len(tx.all("retention_delete_invocations", ids=ids))
            for r in rows:
                for blob in (r["payload"], r["result"]):
                    ref = sniff_ref(blob)
                    if ref is not None and is_spilled(ref):  # never a ref a user passed
                        done.refs.append(ref)
        if len(rows) < batch:
            return done
