"""Retention: trim the journals, then the rows, of invocations that ended long ago.

The rules and what is returned are in ../retention.py; this is the trim, in batches of a
transaction each, so claims and acks get the write lock between batches however much there is to
trim. After each batch the pages it freed go back to the filesystem (SQLite's incremental
vacuum; Postgres's autovacuum needs nothing from here).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from ...storage import MAX_REF_BYTES, StorageRef, sniff_ref
from ..retention import BATCH, ROLLUP_KEEP_S, ROLLUP_TRIM_SPAN_S, Trimmed, check_age
from .base import StoreBase
from .records import listed_objects


class RetentionStore(StoreBase):
    def trim_retention(
        self,
        *,
        frames_older_than_s: float | None = None,
        invocations_older_than_s: float | None = None,
        ns: str | None = None,
        now: float | None = None,
        batch: int = BATCH,
        rollup_older_than_s: float | None = ROLLUP_KEEP_S,
    ) -> Trimmed:
        """Trim frames, then rows, of invocations that ended that long ago (None: keep), and
        the dashboard's rollup buckets past the longest window it shows.

        `ns=None` trims every namespace. Returns counts and the spilled refs to delete.
        """
        frames_age = check_age("frames_older_than_s", frames_older_than_s)
        rows_age = check_age("invocations_older_than_s", invocations_older_than_s)
        rollup_age = check_age("rollup_older_than_s", rollup_older_than_s)
        now = time.time() if now is None else now
        if ns is None:
            with self.connector.transaction(write=False) as tx:
                namespaces = [r["name"] for r in tx.all("retention_namespaces")]
        else:
            namespaces = [ns]
        done = Trimmed()
        for name in namespaces:
            if rows_age is not None:
                done.add(self._trim_rows(name, now - rows_age, batch))
            if frames_age is not None:
                done.add(self._trim_frames(name, now - frames_age, batch))
            if rollup_age is not None:
                self._trim_rollup(name, now - rollup_age)
        return done

    def _trim_rollup(self, ns: str, cutoff: float) -> None:
        """Rollup rows older than `cutoff`, a minute of them per transaction (a few rows per
        queue, bin and second: a batch stays small however long retention did not run)."""
        while True:
            with self.connector.transaction() as tx:
                row = tx.one("retention_rollup_oldest", ns=ns)
                oldest = None if row is None else row["at"]
                if oldest is None or oldest >= cutoff:
                    return
                tx.all(
                    "retention_trim_rollup", ns=ns, upto=min(cutoff, oldest + ROLLUP_TRIM_SPAN_S)
                )
            self._reclaim()

    def _reclaim(self) -> None:
        """Give the pages the last batch freed back to the filesystem: SQLite's incremental
        vacuum (`SqliteConnector.reclaim_space`). Postgres's autovacuum needs nothing from here,
        and its connector has no such method."""
        reclaim = getattr(self.connector, "reclaim_space", None)
        if reclaim is not None:
            reclaim()

    def _trim_frames(self, ns: str, cutoff: float, batch: int) -> Trimmed:
        done = Trimmed()
        while True:
            with self.connector.transaction() as tx:
                rows = tx.all(
                    "retention_trim_frames",
                    ns=ns,
                    cutoff=cutoff,
                    limit=batch,
                    ref_bytes=MAX_REF_BYTES,
                )
            done.frames += len(rows)
            done.refs += _spilled(r["value"] for r in rows)
            if rows:
                self._reclaim()
            if len(rows) < batch:
                return done

    def _trim_rows(self, ns: str, cutoff: float, batch: int) -> Trimmed:
        done = Trimmed()
        while True:
            with self.connector.transaction() as tx:
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
                frames = tx.all("retention_delete_frames_of", ids=ids, ref_bytes=MAX_REF_BYTES)
                done.frames += len(frames)
                done.refs += _spilled(f["value"] for f in frames)
                done.invocations += len(tx.all("retention_delete_invocations", ids=ids))
                done.refs += _spilled(b for r in rows for b in (r["payload"], r["result"]))
                done.refs += [ref for r in rows for ref in listed_objects(r["objects"])]
            self._reclaim()
            if len(rows) < batch:
                return done


def _spilled(blobs: Iterable[bytes | None]) -> list[StorageRef]:
    """The spilled objects among `blobs` (never a ref a user passed on purpose)."""
    from ...spill import is_spilled  # the object store: not imported with the SDK

    refs = (sniff_ref(blob) for blob in blobs)
    return [ref for ref in refs if ref is not None and is_spilled(ref)]
