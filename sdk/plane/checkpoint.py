"""WAL checkpoints off the commit path.

SQLite checkpoints inside the COMMIT that takes the log past 1000 pages: that commit copies the
log's pages back into the database file and fsyncs it, and at synchronous=NORMAL, where nothing
else syncs the log, it writes out and syncs the whole log first. One `q.call` in about a hundred
paid for it: at NORMAL a p99 of 6.0-6.2 ms against 2.7-2.8 ms with the checkpoint moved away,
for a p50 of 1.8 ms (`bench.cpu_per_call --normal`). At FULL the log is on disk already and the
cost did not show.

So at NORMAL a writer's automatic checkpoint is off, and a thread of its process checkpoints
instead, on a connection of its own, after every CHECKPOINT_EVERY write commits: PASSIVE, which
never waits for a reader or a writer and never holds one up. Each process that writes
checkpoints for its own commits, so the log stays about as short as before whoever writes; a
process that never writes that many starts no thread, and SQLite checkpoints the log when the
last connection to the file closes, as before. A FULL connection keeps SQLite's checkpoint.
"""

from __future__ import annotations

import logging
import sqlite3
import threading

log = logging.getLogger(__name__)

#: Write commits between two checkpoints. A submit or a claim writes about 8 pages to the log,
#: so the log reaches about 2,000 pages, twice SQLite's own interval: each checkpoint syncs,
#: and every 128 commits cost the p50 of a call at NORMAL about 3%.
CHECKPOINT_EVERY = 256
#: How long `close` waits for a checkpoint under way (the thread is a daemon either way).
CLOSE_WAIT_S = 5.0


class Checkpointer:
    """Checkpoints one database file's log on a thread of its own (see the module)."""

    def __init__(self, path: str, *, every: int = CHECKPOINT_EVERY) -> None:
        if every < 1:
            raise ValueError(f"checkpoint every {every} commits: must be at least 1")
        self.path = path
        self.every = every
        #: Checkpoints run so far (tests and diagnostics).
        self.runs = 0
        self._due = threading.Event()
        self._closed = False
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def committed(self, commits: int) -> None:
        """The writer's `commits`-th write commit on this file (called in order)."""
        if commits % self.every:
            return
        with self._lock:
            if self._closed:
                return
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="lakeshore-checkpoint", daemon=True
                )
                self._thread.start()
        self._due.set()

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while True:
                self._due.wait()
                self._due.clear()
                if self._closed:
                    return
                try:
                    if conn is None:
                        conn = sqlite3.connect(
                            self.path, isolation_level=None, check_same_thread=False
                        )
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    self.runs += 1
                except sqlite3.Error as exc:
                    # The next commit's checkpoint tries again; the writer meets any damage.
                    log.debug("checkpoint of %s failed: %s", self.path, exc)
        finally:
            if conn is not None:
                conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
        self._due.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(CLOSE_WAIT_S)
