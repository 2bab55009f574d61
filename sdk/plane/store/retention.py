"""Retention: trim the journals, then the rows, of invocations that ended long ago.

The rules and what is returned are in ../retention.py; this is the trim, in batches of a
transaction each.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from ...storage import MAX_REF_BYTES, StorageRef, sniff_ref
from ..retention import BATCH, Trimmed, check_age
from .base import StoreBase


class RetentionStore(StoreBase):
    def trim_retention(
        self,
        *,
        frames_older_than_s: float | None = None,
        invocations_older_than_s: float | None = None,
        ns: str | None = None,
        now: float | None = None,
        batch: int = BATCH,
    ) -> Trimmed:
        """Trim frames, then rows, of invocations that ended that long ago (None: keep).

        `ns=None` trims every namespace. Returns counts and the spilled refs to delete.
        """
        frames_age = check_age("frames_older_than_s", frames_older_than_s)
        rows_age = check_age("invocations_older_than_s", invocations_older_than_s)
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
        return done

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
            if len(rows) < batch:
                return done


def _spilled(blobs: Iterable[bytes | None]) -> list[StorageRef]:
    """The spilled objects among `blobs` (never a ref a user passed on purpose)."""
    from ...spill import is_spilled  # the object store: not imported with the SDK

    refs = (sniff_ref(blob) for blob in blobs)
    return [ref for ref in refs if ref is not None and is_spilled(ref)]
