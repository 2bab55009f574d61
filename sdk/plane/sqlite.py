"""The SQLite connector: the embedded plane, shared safely by every process on one box.

WAL lets readers run beside the single writer; every write transaction starts with
BEGIN IMMEDIATE so two processes claiming at once queue on the lock instead of failing on a
read-to-write upgrade. Commits are durable by default (synchronous=FULL): a submit that returned
an id survives a power cut. `durable=False` (synchronous=NORMAL) keeps the database consistent
but may lose the last commits on power loss, not on a process crash; it roughly halves the cost
of a small commit.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import StoreDamaged
from .connector import Row
from .queries import SQLITE, bind, migrations, queries, split_statements
from .wakeup import CrossProcessWaker, Waker

#: How long a writer waits for another process's transaction before giving up.
BUSY_TIMEOUT_MS = 30_000


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


class SqliteTransaction:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._queries = queries(SQLITE)

    def all(self, query: str, **params: Any) -> list[Row]:
        sql, flat = bind(SQLITE, self._queries[query], params)
        cur = self._conn.execute(sql, flat)
        return [dict(r) for r in cur.fetchall()] if cur.description else []

    def one(self, query: str, **params: Any) -> Row | None:
        sql, flat = bind(SQLITE, self._queries[query], params)
        cur = self._conn.execute(sql, flat)
        if not cur.description:
            return None
        row = cur.fetchone()
        cur.fetchall()  # drain RETURNING so the statement completes before COMMIT
        return dict(row) if row is not None else None


class SqliteConnector:
    dialect = SQLITE

    def __init__(self, path: str | Path, *, durable: bool = True) -> None:
        self.path = str(path)
        self.memory = self.path == ":memory:"
        self.durable = durable and not self.memory
        self.waker = Waker()
        self._lock = threading.RLock()
        #: Set once the file was found damaged: /readyz reports it.
        self.problem: str | None = None
        if not self.memory:
            _create_private(Path(self.path))
        self._conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
        )
        self._conn.row_factory = sqlite3.Row
        self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        try:
            if not self.memory:
                self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute(f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}")
        except sqlite3.DatabaseError as exc:  # "file is not a database"
            if type(exc) is not sqlite3.DatabaseError:
                raise
            self._conn.close()
            raise self.damaged(exc) from exc
        self._migrate()
        if not self.memory:
            self.waker.relay_through(CrossProcessWaker(Path(self.path + ".wake")))

    def _migrate(self) -> None:
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

    def damaged(self, exc: sqlite3.DatabaseError) -> StoreDamaged:
        """The error for a damaged file, remembered for /readyz (see `problem`)."""
        self.problem = damage_message(self.path, str(exc))
        return StoreDamaged(self.problem)

    def quick_check(self) -> str | None:
        """`PRAGMA quick_check`: None when the file is sound, else what is wrong with it."""
        try:
            with self._lock:
                rows = [r[0] for r in self._conn.execute("PRAGMA quick_check(5)")]
        except sqlite3.DatabaseError as exc:
            rows = [str(exc)]
        if rows == ["ok"]:
            return None
        self.problem = damage_message(self.path, "; ".join(rows))
        return self.problem

    @contextmanager
    def transaction(
        self, *, write: bool = True, durable: bool = True
    ) -> Iterator[SqliteTransaction]:
        # In WAL mode the setting is read at COMMIT: NORMAL skips this commit's fsync, and the
        # next durable commit's fsync carries its frames to disk too (the WAL is sequential).
        relax = write and not durable and self.durable
        with self._lock:
            if relax:
                self._conn.execute("PRAGMA synchronous = NORMAL")
            try:
                self._conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    yield SqliteTransaction(self._conn)
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                self._conn.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                if type(exc) is not sqlite3.DatabaseError:
                    raise  # busy, locked, I/O, a constraint: the file is not what is wrong
                raise self.damaged(exc) from exc
            finally:
                if relax:
                    self._conn.execute("PRAGMA synchronous = FULL")

    def close(self) -> None:
        self.waker.close()
        with self._lock:
            self._conn.close()
