"""Retention: trim the journals, then the rows, of invocations that ended long ago.

The rules and what is returned are in ../retention.py; this is the trim, in batches of a
transaction each.
"""

from __future__ import annotations

import time

from ...spill import is_spilled
from ...storage import MAX_REF_BYTES, sniff_ref
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
                done.frames += self._trim_frames(name, now - frames_age, batch)
        return done

    def _trim_frames(self, ns: str, cutoff: float, batch: int) -> int:
        total = 0
        while True:
            with self.connector.transaction() as tx:
                n = len(tx.all("retention_trim_frames", ns=ns, cutoff=cutoff, limit=batch))
            total += n
            if n < batch:
                return total

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
                done.frames += len(tx.all("retention_delete_frames_of", ids=ids))
                done.invocations += len(tx.all("retention_delete_invocations", ids=ids))
                for r in rows:
                    for blob in (r["payload"], r["result"]):
                        ref = sniff_ref(blob)
                        if ref is not None and is_spilled(ref):  # never a ref a user passed
                            done.refs.append(ref)
            if len(rows) < batch:
                return done
