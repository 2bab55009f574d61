"""Retention: trim the journals, then the rows, of invocations that ended long ago.

The rules and what is returned are in ../retention.py; this is the trim, in batches of a
transaction each, so claims and acks get the write lock between batches however much there is to
trim. After each batch the pages it freed go back to the filesystem (SQLite's incremental
vacuum; Postgres's autovacuum needs nothing from here).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from dreamlake.lakeshore.plane.connector import Transaction
from dreamlake.lakeshore.plane.queries import SQLITE
from dreamlake.lakeshore.plane.retention import (
    BATCH,
    BATCH_MIN,
    BATCH_TARGET_S,
    RECLAIM_EVERY_S,
    ROLLUP_KEEP_S,
    ROLLUP_TRIM_SPAN_S,
    Trimmed,
    check_age,
)
from dreamlake.lakeshore.storage import MAX_REF_BYTES, StorageRef, is_spilled, sniff_ref

from .records import listed_objects
from .runtimes import RUNTIME_GRACE_S, RuntimeStore


class RetentionStore(RuntimeStore):
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
                done.runtime_blobs += self._trim_runtimes(name, now - RUNTIME_GRACE_S)
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

    def _pace(self, batch: int) -> _Pace:
        return _Pace(batch, single_writer=self.connector.dialect is SQLITE)

    def _trim_frames(self, ns: str, cutoff: float, batch: int) -> Trimmed:
        def step(tx: Transaction, limit: int, done: Trimmed) -> int:
            rows = tx.all(
                "retention_trim_frames", ns=ns, cutoff=cutoff, limit=limit, ref_bytes=MAX_REF_BYTES
            )
            done.frames += len(rows)
            done.refs += _spilled(r["value"] for r in rows)
            return len(rows)

        return self._in_batches(batch, step)

    def _trim_rows(self, ns: str, cutoff: float, batch: int) -> Trimmed:
        def step(tx: Transaction, limit: int, done: Trimmed) -> int:
            rows = tx.all(
                "retention_old_invocations",
                ns=ns,
                cutoff=cutoff,
                limit=limit,
                ref_bytes=MAX_REF_BYTES,
            )
            ids = [r["id"] for r in rows]
            if ids:
                frames = tx.all("retention_delete_frames_of", ids=ids, ref_bytes=MAX_REF_BYTES)
                done.frames += len(frames)
                done.refs += _spilled(f["value"] for f in frames)
                done.invocations += len(tx.all("retention_delete_invocations", ids=ids))
            done.refs += _spilled(
                b for r in rows for b in (r["payload"], r["result"], r["checkpoint"])
            )
            done.refs += [ref for r in rows for ref in listed_objects(r["objects"])]
            return len(rows)

        return self._in_batches(batch, step)

    def _in_batches(self, batch: int, step: Callable[[Transaction, int, Trimmed], int]) -> Trimmed:
        """Run `step` (one batch of at most `limit` rows, counted into `done`; returns how many
        it took) a transaction each, paced, until a batch comes back short."""
        done = Trimmed()
        pace = self._pace(batch)
        while True:
            limit = pace.rows
            with self.connector.transaction() as tx:
                pace.start()  # holding the write lock from here: a wait for it does not count
                taken = step(tx, limit, done)
            pace.held(freed=bool(taken))
            last = taken < limit
            if pace.reclaim_now(last):
                self._reclaim()
            if last:
                return done
            pace.pause()


class _Pace:
    """How many rows the next batch takes, and the pause after it (SQLite: BATCH_TARGET_S).

    `start()` as a batch's transaction begins, `held()` once it committed: that time (the write
    lock held) sizes the next batch. Giving the space back follows, which also takes the lock
    but costs about the same whatever the batch's size (counted in sizing, it would shrink
    batches to nothing); `pause()` then waits as long as both took. On Postgres a batch locks
    only its own rows: `rows` stays the caller's and nothing pauses.
    """

    def __init__(self, most: int, *, single_writer: bool) -> None:
        self._most = most
        self._single_writer = single_writer
        # A first batch of BATCH rows held the lock for tens of ms on a deep table: start small.
        self.rows = min(most, BATCH_MIN * 5) if single_writer else most
        self._started = self._took = 0.0
        self._unreclaimed = False
        self._reclaimed_at = time.perf_counter()

    def start(self) -> None:
        self._started = time.perf_counter()

    def held(self, *, freed: bool) -> None:
        self._took = max(time.perf_counter() - self._started, 1e-6)
        self._unreclaimed |= freed

    def reclaim_now(self, last: bool) -> bool:
        """Give freed pages back after the last batch and at most every RECLAIM_EVERY_S: each
        reclaim is a commit of its own, as long as a small batch."""
        now = time.perf_counter()
        if not self._unreclaimed or not (last or now - self._reclaimed_at >= RECLAIM_EVERY_S):
            return False
        self._unreclaimed, self._reclaimed_at = False, now
        return True

    def pause(self) -> None:
        """After a full batch: size the next one from this one's time, then wait as long as
        this batch and its space reclaim held the lock."""
        if not self._single_writer:
            return
        least = min(BATCH_MIN, self._most)
        self.rows = max(least, min(self._most, int(self.rows * BATCH_TARGET_S / self._took)))
        time.sleep(time.perf_counter() - self._started)


def _spilled(blobs: Iterable[bytes | None]) -> list[StorageRef]:
    """The spilled objects among `blobs` (never a ref a user passed on purpose)."""
    refs = (sniff_ref(blob) for blob in blobs)
    return [ref for ref in refs if ref is not None and is_spilled(ref)]
