"""The SQLite connector: the embedded plane, shared safely by every process on one box.

WAL lets readers run beside the single writer; every write transaction starts with
BEGIN IMMEDIATE so two processes claiming at once queue on the lock instead of failing on a
read-to-write upgrade. Commits are durable by default (synchronous=FULL): a submit that returned
an id survives a power cut. `durable=False` (synchronous=NORMAL) keeps the database consistent
but may lose the last commits on power loss, not on a process crash; it roughly halves the cost
of a small commit. A write may also commit at once and owe its fsync (`sync_later`): the
caller names nothing it wrote until `sync` says a flush of the log, its own or a later durable
commit's, has carried it to disk.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from dreamlake.lakeshore.errors import (
    DispatchError,
    InvalidArgument,
    NotFound,
    StoreDamaged,
    Unavailable,
)

from .checkpoint import Checkpointer
from .connector import Row
from .queries import SQLITE, bind, migration_versions, migrations, queries, split_statements
from .wakeup import CrossProcessWaker, Waker

T = TypeVar("T")

#: How long a writer waits for another process's transaction before giving up.
BUSY_TIMEOUT_MS = 30_000
#: While another process holds the write lock, BEGIN IMMEDIATE is tried again after this long,
#: doubling up to BUSY_POLL_MAX_S. SQLite's own busy handler sleeps 1, 2, 5, 10 ... 100 ms
#: between tries: a claim behind a trim batch of 2 ms slept through the pause after it, and
#: through the next ones, for half a second.
BUSY_POLL_S = 0.0001
BUSY_POLL_MAX_S = 0.001
#: The page size of a new file. A commit writes every page it touched to the log, whole, and
#: a job's submit and ack each touch about ten (the row, its indexes, the counters): at SQLite's
#: default of 4096 bytes a `q.call`'s fsync carried ~80 KB of log where ~24 KB hold the change.
#: An existing file keeps the size it was made with.
PAGE_SIZE = 1024
#: A durable write may run on the caller's event loop (`run_if_free(durable=True)`) while this
#: file's commits take less than this on average: a disk whose fsync is slower sends them to a
#: thread, so that one slow fsync never holds every other request of a server.
INLINE_COMMIT_MAX_S = 0.002
#: Weight of the newest commit in that average.
_COMMIT_EWMA = 0.2


def _busy(exc: sqlite3.OperationalError) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


def damage_message(path: str, what: str) -> str:
    return (
        f"the database {path} is damaged ({what}): stop every process using it, restore it "
        f"from a backup, or salvage what is left with `sqlite3 '{path}' .recover | sqlite3 "
        f"'{path}.recovered'` and start on the copy"
    )


def _create_private(path: Path) -> None:
    """A new database (and its folder) readable by its owner only: it holds every payload.

    SQLite gives the -wal and -shm files the database file's permissions, so they follow.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def unusable(path: str, exc: OSError | sqlite3.OperationalError) -> DispatchError:
    """The error for a database path this process cannot use, naming the path and the fix."""
    if isinstance(exc, (FileExistsError, NotADirectoryError)):
        why = f"{exc.filename} is a file, not a folder"
    elif isinstance(exc, OSError):
        why = f"{exc.strerror or type(exc).__name__}: {exc.filename or path}"
    elif any(w in str(exc) for w in ("unable to open", "readonly", "read-only")):
        why = str(exc)
    else:  # busy, locked, I/O: the path is fine, the moment is not
        return Unavailable(f"cannot open the database {path}: {exc}")
    return InvalidArgument(
        f"cannot open the database {path} ({why}): point --store, LAKESHORE_STORE or "
        "LAKESHORE_HOME at a folder this user can write"
    )


class SqliteTransaction:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._queries = queries(SQLITE)

    def all(self, query: str, **params: Any) -> list[Row]:
        sql, flat = bind(SQLITE, self._queries[query], params)
        cur = self._conn.execute(sql, flat)
        return [dict(r) for r in cur.fetchall()] if cur.description else []

    def batch(self, statements: Sequence[tuple[str, Mapping[str, Any]]]) -> list[list[Row]]:
        """One after the other: in this process, a statement costs no round trip."""
        return [self.all(query, **params) for query, params in statements]

    def one(self, query: str, **params: Any) -> Row | None:
        sql, flat = bind(SQLITE, self._queries[query], params)
        cur = self._conn.execute(sql, flat)
        if not cur.description:
            return None
        row = cur.fetchone()
        cur.fetchall()  # drain RETURNING so the statement completes before COMMIT
        return dict(row) if row is not None else None


#: The start-up integrity check reads the whole file up to this size (well under a second);
#: a bigger one gets its header and schema checked (`SqliteConnector.quick_check`).
FULL_CHECK_MAX_BYTES = 256 << 20


def _file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


class SqliteConnector:
    dialect = SQLITE

    def __init__(self, path: str | Path, *, durable: bool = True, create: bool = True) -> None:
        """Open (with `create`, also create) the database at `path`.

        A path that cannot hold a database (under a file, in a folder this user cannot write)
        is an InvalidArgument naming the path; with `create=False` a missing file is NotFound,
        for readers of an existing plane (the controller) that must not make an empty one.
        """
        self.path = str(path)
        self.memory = self.path == ":memory:"
        self.durable = durable and not self.memory
        self.waker = Waker()
        self._lock = threading.RLock()
        #: A second connection for read transactions (file databases): in WAL mode a reader
        #: never waits for the writer, so a read is not queued behind another request's fsync.
        self._reader: sqlite3.Connection | None = None
        self._read_lock = threading.Lock()
        #: A moving average of a durable COMMIT's seconds (its fsync): see INLINE_COMMIT_MAX_S.
        self.commit_s = 0.0
        #: Write commits on this connection (`mark`), the last after which every owed commit
        #: was on disk, and the last that owed its fsync (`sync_later`): see `sync`.
        self._commits = 0
        self._synced = 0
        self._owed = 0
        #: How long a BEGIN waits for another process's write (0 in `run_if_free`).
        self._wait_s = BUSY_TIMEOUT_MS / 1000
        #: Set once the file was found damaged: /readyz reports it.
        self.problem: str | None = None
        #: At NORMAL, runs this file's checkpoints instead of the commits (checkpoint.py);
        #: None at FULL, where SQLite's own cost a commit little, and in memory.
        self.checkpointer: Checkpointer | None = None
        try:
            if not (self.memory or create or Path(self.path).is_file()):
                raise NotFound(
                    f"no database at {self.path}: this command reads an existing plane and "
                    "creates none; check the path (--store, LAKESHORE_STORE or LAKESHORE_HOME)"
                )
            self._open(durable)
        except (OSError, sqlite3.OperationalError) as exc:
            raise unusable(self.path, exc) from exc

    def _open(self, durable: bool) -> None:
        if not self.memory:
            _create_private(Path(self.path))
        self._conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
        )
        self._conn.row_factory = sqlite3.Row
        add_functions(self._conn)
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            # The settle trigger cancels a failed parent's whole waiting subtree itself
            # (migration 36), so it must not fire again on the rows it changes: nested, one
            # level a generation, a chain deeper than SQLite's trigger depth (1000) could not be
            # cancelled. Off is SQLite's default; said here so no later change turns it on.
            self._conn.execute("PRAGMA recursive_triggers = OFF")
            if not self.memory:
                # Both take effect on a new file only (before its first table, and the page
                # size before WAL too); an existing one keeps its own. Retention gives freed
                # pages back (`reclaim_space`).
                self._conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
                self._conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
                self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute(f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}")
            if not (self.memory or self.durable):
                self._conn.execute("PRAGMA wal_autocheckpoint = 0")  # checkpoint.py instead
                self.checkpointer = Checkpointer(self.path)
            self._migrate()
        except sqlite3.DatabaseError as exc:  # "file is not a database"
            self._conn.close()
            if type(exc) is not sqlite3.DatabaseError:
                raise
            raise self.damaged(exc) from exc
        if not self.memory:
            self._reader = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=False,
                timeout=BUSY_TIMEOUT_MS / 1000,
            )
            self._reader.row_factory = sqlite3.Row
            add_functions(self._reader)
            self._reader.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self.waker.relay_through(CrossProcessWaker(Path(self.path + ".wake")))

    def run_if_free(self, fn: Callable[[], T], *, durable: bool = False) -> tuple[bool, T | None]:
        """Run the write `fn` on this thread if the writer is free this instant: (True, its
        value); else (False, None) at once, without waiting. The server runs its hot writes on
        its event loop this way instead of paying a thread-pool hop, which costs more CPU than
        the write (about 0.13 ms a hop against 0.1 ms for a claim). Free means this process's
        lock (no other thread mid-commit) and the file's (no other process mid-write: BEGIN
        answers busy at once instead of waiting). A `durable` write, which waits for its
        fsync, runs here only while this file's commits are quick (`commit_s`)."""
        if self.memory or (durable and self.commit_s > INLINE_COMMIT_MAX_S):
            return False, None
        if not self._lock.acquire(blocking=False):
            return False, None
        try:
            self._wait_s = 0.0
            try:
                return True, fn()
            except sqlite3.OperationalError as exc:
                if not _busy(exc):
                    raise
                return False, None
            finally:
                self._wait_s = BUSY_TIMEOUT_MS / 1000
        finally:
            self._lock.release()

    def _begin(self, sql: str) -> None:
        """BEGIN, polling every BUSY_POLL_S..BUSY_POLL_MAX_S while another process writes
        (for up to `_wait_s`), instead of SQLite's coarse busy handler."""
        self._conn.execute("PRAGMA busy_timeout = 0")
        try:
            deadline = None
            delay = BUSY_POLL_S
            while True:
                try:
                    self._conn.execute(sql)
                    return
                except sqlite3.OperationalError as exc:
                    if not _busy(exc):
                        raise
                    now = time.monotonic()
                    deadline = now + self._wait_s if deadline is None else deadline
                    if now >= deadline:
                        raise
                time.sleep(delay)
                delay = min(delay * 2, BUSY_POLL_MAX_S)
        finally:
            self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")

    @property
    def reads_inline(self) -> bool:
        """Whether a read transaction is quick enough to run on an event loop: it has its own
        connection, which never waits for a writer (WAL), and no network between."""
        return self._reader is not None

    def _migrate(self) -> None:
        """Bring the file to the newest schema. A file that has every migration is told so by
        one read, without the write lock: every process that opens the plane (each CLI read)
        took it, and waited behind any writer's commit to learn that nothing was to be done."""
        try:
            done = {r[0] for r in self._conn.execute("SELECT version FROM schema_version")}
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
        else:
            if migration_versions() <= done:
                return
        with self.transaction() as _:
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY)"
            )
            done = {r[0] for r in self._conn.execute("SELECT version FROM schema_version")}
            for version, sql in migrations(SQLITE):
                if version in done:
                    continue
                for statement in split_statements(sql):
                    self._conn.execute(statement)
                self._conn.execute("INSERT INTO schema_version VALUES (?)", (version,))

    def reclaim_space(self, pages: int = 4096) -> None:
        """Hand up to `pages` free pages back to the filesystem (retention calls this after
        each batch it deletes). Only a file made with auto_vacuum = INCREMENTAL (every file
        since `_open` sets it) keeps the bookkeeping; on an older one this does nothing until
        a one-off offline `VACUUM`. Run as a script, its own short write transaction: the
        pragma frees one page per step, and a plain execute steps once."""
        if self.memory:
            return
        with self._lock:
            try:
                self._conn.executescript(f"PRAGMA incremental_vacuum({int(pages)});")
                # The trim's batches dirtied pages all over the indexes: copied back into the
                # file here, by the trim, they are not left for the next claim or ack to copy
                # as its automatic checkpoint. PASSIVE: it blocks no reader and no writer.
                self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            except sqlite3.OperationalError as exc:
                if not _busy(exc):
                    raise  # else: another writer past the busy timeout; the next batch frees

    def damaged(self, exc: sqlite3.DatabaseError) -> StoreDamaged:
        """The error for a damaged file, remembered for /readyz (see `problem`)."""
        self.problem = damage_message(self.path, str(exc))
        return StoreDamaged(self.problem)

    def quick_check(self) -> str | None:
        """`PRAGMA quick_check` of a file up to `FULL_CHECK_MAX_BYTES`, else of its header and
        schema only: None when sound, else what is wrong with it.

        A full check reads every page: about a minute per few GB, so a server on a plane 10M
        jobs deep would take minutes to start. A bigger file is checked as far as opening it
        needs, and damage further in is caught where a statement meets it (`damaged`).
        """
        full = self.memory or _file_size(self.path) <= FULL_CHECK_MAX_BYTES
        sql = "PRAGMA quick_check(5)" if full else "SELECT count(*) FROM sqlite_master"
        try:
            with self._lock:
                rows = [str(r[0]) for r in self._conn.execute(sql)]
        except sqlite3.DatabaseError as exc:
            rows = [str(exc)]
        if rows == ["ok"] or (not full and rows and rows[0].isdigit()):
            return None
        self.problem = damage_message(self.path, "; ".join(rows))
        return self.problem

    @contextmanager
    def transaction(
        self, *, write: bool = True, durable: bool = True, sync_later: bool = False
    ) -> Iterator[SqliteTransaction]:
        # In WAL mode the setting is read at COMMIT: NORMAL skips this commit's fsync, and the
        # next durable commit's fsync carries its frames to disk too (the WAL is sequential).
        if not write and self._reader is not None:
            with self._read_lock, self._reading(self._reader) as tx:
                yield tx
            return
        relax = write and self.durable and (sync_later or not durable)
        with self._lock:
            if relax:
                self._conn.execute("PRAGMA synchronous = NORMAL")
            try:
                self._begin("BEGIN IMMEDIATE" if write else "BEGIN")
                changes = self._conn.total_changes
                try:
                    yield SqliteTransaction(self._conn)
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                if write and self.durable and not relax:
                    self._timed_commit()
                else:
                    self._conn.execute("COMMIT")
                if write:
                    self._committed(
                        relax, sync_later and durable, self._conn.total_changes != changes
                    )
            except sqlite3.DatabaseError as exc:
                if type(exc) is not sqlite3.DatabaseError:
                    raise  # busy, locked, I/O, a constraint: the file is not what is wrong
                raise self.damaged(exc) from exc
            finally:
                if relax:
                    self._conn.execute("PRAGMA synchronous = FULL")

    def _committed(self, relaxed: bool, owed: bool, wrote: bool) -> None:
        """Count a write commit; after a durable one, every owed commit so far is on disk.

        A durable commit that wrote rows had SQLite fsync the log, and with it every frame
        before its own. One that wrote nothing wrote no frame and synced nothing, yet it may
        answer with what an owed commit made (a submit sent again finds the job that its lost
        answer named): it pays what this connection owes first."""
        self._commits += 1
        if self.checkpointer is not None:
            self.checkpointer.committed(self._commits)
        if not self.durable:
            return
        if owed:
            self._owed = self._commits
        elif not relaxed:
            if not wrote and self._owed > self._synced:
                self._sync_log()
            self._synced = self._commits

    def mark(self) -> int:
        return self._commits

    def synced(self, mark: int) -> bool:
        # Only owed commits need a flush: a claim's commit after `_synced` promised none.
        return not self.durable or self._owed <= self._synced or self._synced >= mark

    def sync(self, mark: int) -> None:
        # Under the writer's lock: a commit whose row the caller has already read may not
        # have counted itself yet (`_committed` runs after COMMIT), and a durable one pays.
        with self._lock:
            if self.synced(mark):
                return
        self._sync_log()
        self._synced = max(self._synced, mark)

    def _sync_log(self) -> None:
        """fsync the WAL: every frame written to it so far, by any connection of any process,
        is on disk after. A missing WAL was checkpointed into the file and removed, and a
        checkpoint syncs the file (at NORMAL too), so there is nothing left to flush."""
        try:
            fd = os.open(self.path + "-wal", os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)

    def _timed_commit(self) -> None:
        start = time.perf_counter()
        self._conn.execute("COMMIT")
        took = time.perf_counter() - start
        self.commit_s += _COMMIT_EWMA * (took - self.commit_s)

    @contextmanager
    def _reading(self, conn: sqlite3.Connection) -> Iterator[SqliteTransaction]:
        try:
            conn.execute("BEGIN")
            try:
                yield SqliteTransaction(conn)
            finally:
                conn.execute("COMMIT")  # a read: ending it only lets the WAL move on
        except sqlite3.DatabaseError as exc:
            if type(exc) is not sqlite3.DatabaseError:
                raise
            raise self.damaged(exc) from exc

    def close(self) -> None:
        self.waker.close()
        if self.checkpointer is not None:
            self.checkpointer.close()
        with self._lock:
            self._conn.close()
        with self._read_lock:
            if self._reader is not None:
                self._reader.close()


@functools.lru_cache(maxsize=256)
def _pattern(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _regexp(pattern: str | None, text: str | None) -> bool:
    """SQLite's `text REGEXP pattern` (it has the operator, not the function): a search, as
    Postgres's `~` is. A claim matches a job's GPU types with it (the `fits` fragment)."""
    if pattern is None or text is None:
        return False
    return _pattern(pattern).search(text) is not None


def add_functions(conn: sqlite3.Connection) -> None:
    conn.create_function("regexp", 2, _regexp, deterministic=True)
