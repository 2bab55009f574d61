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
write lock for long. The trim itself is `SqlStore.trim_retention` (store/retention.py); this
module holds what it returns and the defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.storage import StorageRef

#: Defaults for the server's retention task (`lakeshore server --retain-*`).
DEFAULT_RETAIN_FRAMES_S: Final = 7 * 86400.0
DEFAULT_RETAIN_INVOCATIONS_S: Final = 30 * 86400.0
#: Rows per transaction, at most.
BATCH: Final = 1000
#: On SQLite (one writer for the whole file) a trim batch holds the write lock about this long:
#: its row count follows the last batch's time. The trim then waits as long as the batch took,
#: so a claim or an ack that queued behind it gets the lock in the pause. SQLite's lock is not
#: fair: batches back to back starved a waiting claim for half a second.
BATCH_TARGET_S: Final = 0.002
#: The fewest rows a SQLite batch shrinks to.
BATCH_MIN: Final = 20
#: Freed pages go back to the filesystem (SQLite) after the last batch and at most this often.
RECLAIM_EVERY_S: Final = 0.1
#: The dashboard's completion rollup (migration 21) is kept this long: its longest window (a
#: day) and a margin. Its rows are counts, not history: nothing else reads them.
ROLLUP_KEEP_S: Final = 25 * 3600.0
#: Seconds of rollup rows one retention transaction deletes.
ROLLUP_TRIM_SPAN_S: Final = 60


@dataclass
class Trimmed:
    """What one trim removed, and the spilled objects its caller should delete."""

    frames: int = 0
    invocations: int = 0
    #: Runtime blobs (issue 46) that no kept bundle named any more.
    runtime_blobs: int = 0
    refs: list[StorageRef] = field(default_factory=list)

    def add(self, other: Trimmed) -> None:
        self.frames += other.frames
        self.invocations += other.invocations
        self.runtime_blobs += other.runtime_blobs
        self.refs.extend(other.refs)

    def public(self) -> dict[str, Any]:
        return {
            "frames": self.frames,
            "invocations": self.invocations,
            "runtime_blobs": self.runtime_blobs,
            "refs": [{"url": r.url, "key": r.key, "size": r.size} for r in self.refs],
        }

    @classmethod
    def from_public(cls, data: dict[str, Any]) -> Trimmed:
        return cls(
            frames=int(data.get("frames", 0)),
            invocations=int(data.get("invocations", 0)),
            runtime_blobs=int(data.get("runtime_blobs", 0)),
            refs=[StorageRef(r["url"], r["key"], int(r.get("size", 0))) for r in data["refs"]],
        )


def check_age(name: str, value: object) -> float | None:
    """An age in seconds (>= 0), or None for "do not trim this"."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise InvalidArgument(f"{name} must be a number of seconds >= 0, got {value!r}")
    return float(value)
