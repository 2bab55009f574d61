"""The host tier's arena: one shared-memory file that every process on the box maps once.

Why: a fresh tmpfs file costs the kernel a zeroed page per 4 KiB written (about 30 ms per
64 MiB on the reference box) and a fresh mapping a fault per page read (about 7 ms per 64 MiB);
a copy into pages that are already mapped costs 3.4 ms. Ray's plasma store is fast on arrays
for this reason and so is the arena: its pages are allocated once, each process maps the whole
file once, and objects come and go inside it.

Where objects sit is kept in a small SQLite index beside the arena (WAL, no fsync: the index
lives exactly as long as the tmpfs it describes). The index is also the lock: allocation,
eviction and pins are transactions, so any number of processes share one arena safely.

- put: reserve an extent (first fit; when nothing fits, evict the least recently used object
  that nobody pins), copy the bytes in, then seal it. Until sealed no reader sees it; a writer
  that dies mid-copy leaves an unsealed extent that is reclaimed once its pid is gone.
- get: pin the object (one row per process that holds views of it), check it, hand out views;
  the pin goes when the process's last view does. A pinned object is never evicted, so a view
  never changes under its reader.
- eviction makes room by dropping unpinned objects, those with a durable copy first (a reader
  fetches them again), then the least recently used of the rest. An object put with
  `durable=False` lives while the arena has room for it, as in Ray's object store without
  spilling: nothing counts references to objects across processes, so writing every evicted
  object out to disk instead would cost a disk write per put once the arena is full.
"""

from __future__ import annotations

import collections
import contextlib
import mmap
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from .layout import copy_hashing

__all__ = ["Arena", "arena_at", "default_capacity"]

#: How many dropped objects the index remembers, to say "evicted" rather than "not found".
EVICTIONS_REMEMBERED: Final = 10_000
#: Extents start on page boundaries, so no two objects share a page.
PAGE: Final = mmap.PAGESIZE
#: The arena never takes more than this by default, nor more than an eighth of its filesystem.
DEFAULT_MAX_CAPACITY: Final = 2 << 30

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS extents (
    id     TEXT PRIMARY KEY,
    off    INTEGER NOT NULL,
    size   INTEGER NOT NULL,  -- the object's bytes; the extent spans size rounded up to a page
    durable INTEGER NOT NULL, -- 1: a durable tier holds a copy, so eviction may just drop it
    writer INTEGER,           -- the writing pid until sealed; NULL once readable
    used   REAL NOT NULL      -- last put or get, for least-recently-used eviction
);
CREATE INDEX IF NOT EXISTS extents_by_off ON extents (off);
CREATE TABLE IF NOT EXISTS evicted (  -- so a reader of a dropped object is told why
    id TEXT PRIMARY KEY,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS evicted_by_at ON evicted (at);
CREATE TABLE IF NOT EXISTS pins (
    id  TEXT NOT NULL,
    pid INTEGER NOT NULL,
    PRIMARY KEY (id, pid)
) WITHOUT ROWID;
"""


def default_capacity(root: Path) -> int:
    """`LAKESHORE_OBJECTS_CAP` bytes, else an eighth of the filesystem, at most 2 GiB.

    The file is sparse: memory is taken as objects first touch it, and kept for reuse.
    """
    text = os.environ.get("LAKESHORE_OBJECTS_CAP")
    if text:
        try:
            cap = int(text)
        except ValueError:
            cap = -1
        if cap < PAGE:
            raise ValueError(f"LAKESHORE_OBJECTS_CAP must be a byte count >= {PAGE}, got {text!r}")
        return _round_up(cap)
    st = os.statvfs(root)
    return _round_up(min(DEFAULT_MAX_CAPACITY, st.f_blocks * st.f_frsize // 8))


class Arena:
    """One host's arena, as this process sees it (make it with `arena_at`, once per process)."""

    def __init__(self, root: Path, capacity: int) -> None:
        self.root = root
        self.path = root / "arena"
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(
            root / "arena.index", timeout=60, isolation_level=None, check_same_thread=False
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=OFF")
        self._db.executescript(_SCHEMA)
        #: How many live values of each object this process holds (its pin row exists while > 0).
        self._pins: dict[str, int] = {}
        #: Releases that arrived while the lock was held (a finalizer run by GC mid-transaction).
        self._released: collections.deque[str] = collections.deque()
        with self._transaction():  # one process sizes the file; the rest map what it made
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                if os.fstat(fd).st_size == 0:
                    os.ftruncate(fd, capacity)
                self.capacity = os.fstat(fd).st_size
                self._map = mmap.mmap(fd, self.capacity)
            finally:
                os.close(fd)
        self._memory = memoryview(self._map)

    def close(self) -> None:
        with self._lock, contextlib.suppress(BufferError):  # views handed out keep it mapped
            self._db.close()
            self._memory.release()
            self._map.close()

    # -- writing -------------------------------------------------------------------------------

    def reserve(self, ref_id: str, size: int, *, durable: bool) -> int | None:
        """Room for `size` bytes for `ref_id`, at the returned offset; None when the arena cannot
        take it (larger than the arena, everything else pinned, or the id already present)."""
        span = _round_up(size)
        if span > self.capacity:
            return None
        with self._transaction() as db:
            while (off := _first_fit(db, span, self.capacity)) is None:
                if not self._evict_one(db):
                    return None
            try:
                db.execute(
                    "INSERT INTO extents VALUES (?, ?, ?, ?, ?, ?)",
                    (ref_id, off, size, int(durable), os.getpid(), time.time()),
                )
            except sqlite3.IntegrityError:  # another process is putting or fetching the same id
                return None
        return off

    def write_hashing(self, off: int, prefix: bytes, body: memoryview) -> str:
        """Copy an object in (the one copy a put makes), returning its body's digest, hashed as it
        is copied."""
        self._memory[off : off + len(prefix)] = prefix
        start = off + len(prefix)
        return copy_hashing(self._memory[start : start + body.nbytes], body.cast("B"))

    def window(self, off: int, size: int) -> memoryview:
        """A writable view of a reserved extent (a fetch streams into it)."""
        return self._memory[off : off + size]

    def seal(self, ref_id: str) -> None:
        """Make a written object readable."""
        with self._transaction() as db:
            db.execute("UPDATE extents SET writer = NULL WHERE id = ?", (ref_id,))

    def discard(self, ref_id: str) -> None:
        """Drop an extent that was reserved but not sealed (its write failed)."""
        with self._transaction() as db:
            db.execute("DELETE FROM extents WHERE id = ? AND writer IS NOT NULL", (ref_id,))

    # -- reading -------------------------------------------------------------------------------

    def open(self, ref_id: str) -> tuple[memoryview, Callable[[], None]] | None:
        """The object's bytes, pinned until the returned release is called; None if absent."""
        with self._transaction() as db:
            row = db.execute(
                "SELECT off, size FROM extents WHERE id = ? AND writer IS NULL", (ref_id,)
            ).fetchone()
            if row is None:
                return None
            db.execute("UPDATE extents SET used = ? WHERE id = ?", (time.time(), ref_id))
            if not self._pins.get(ref_id):
                db.execute("INSERT OR IGNORE INTO pins VALUES (?, ?)", (ref_id, os.getpid()))
            self._pins[ref_id] = self._pins.get(ref_id, 0) + 1
        off, size = row
        released = threading.Event()

        def release() -> None:
            if not released.is_set():
                released.set()
                self._release(ref_id)

        return self._memory[off : off + size].toreadonly(), release

    def extent(self, ref_id: str) -> tuple[int, int] | None:
        """Where a sealed object sits (offset, size), or None: for diagnostics and tests."""
        with self._lock:
            row = self._db.execute(
                "SELECT off, size FROM extents WHERE id = ? AND writer IS NULL", (ref_id,)
            ).fetchone()
        return None if row is None else (int(row[0]), int(row[1]))

    def holds(self, ref_id: str) -> bool:
        return self.extent(ref_id) is not None

    def remove(self, ref_id: str) -> bool:
        """Drop an object nobody pins (retention); False when it is pinned or absent."""
        with self._transaction() as db:
            cur = db.execute(
                "DELETE FROM extents WHERE id = ? AND writer IS NULL"
                " AND id NOT IN (SELECT id FROM pins)",
                (ref_id,),
            )
            return cur.rowcount > 0

    def _release(self, ref_id: str) -> None:
        # A finalizer may run inside this process's own transaction (GC at any allocation):
        # then it only queues the release, and the next transaction applies it.
        self._released.append(ref_id)
        if self._lock.acquire(blocking=False):
            try:
                self._apply_releases(self._db)
            finally:
                self._lock.release()

    def _apply_releases(self, db: sqlite3.Connection) -> None:
        while self._released:
            ref_id = self._released.popleft()
            left = self._pins.get(ref_id, 0) - 1
            if left > 0:
                self._pins[ref_id] = left
                continue
            self._pins.pop(ref_id, None)
            db.execute("DELETE FROM pins WHERE id = ? AND pid = ?", (ref_id, os.getpid()))

    # -- room ----------------------------------------------------------------------------------

    def _evict_one(self, db: sqlite3.Connection) -> bool:
        """Drop one unpinned object (durable ones first, then the least recently used); False
        when every object is pinned or being written."""
        if self._reap(db):
            return True
        row = db.execute(
            "SELECT id FROM extents WHERE writer IS NULL AND id NOT IN (SELECT id FROM pins)"
            " ORDER BY durable DESC, used LIMIT 1"
        ).fetchone()
        if row is None:
            return False
        db.execute("INSERT OR REPLACE INTO evicted VALUES (?, ?)", (row[0], time.time()))
        db.execute(
            "DELETE FROM evicted WHERE at <"
            " (SELECT at FROM evicted ORDER BY at DESC LIMIT 1 OFFSET ?)",
            (EVICTIONS_REMEMBERED,),
        )
        db.execute("DELETE FROM extents WHERE id = ?", (row[0],))
        return True

    def was_evicted(self, ref_id: str) -> bool:
        """Whether this arena dropped the object to make room (among the last evictions)."""
        with self._lock:
            row = self._db.execute("SELECT 1 FROM evicted WHERE id = ?", (ref_id,)).fetchone()
        return row is not None

    def _reap(self, db: sqlite3.Connection) -> int:
        """Forget pins and unsealed extents of processes that are gone (killed mid-use); returns
        how many extents that freed."""
        pids = {pid for (pid,) in db.execute("SELECT DISTINCT pid FROM pins")}
        pids |= {
            pid for (pid,) in db.execute("SELECT DISTINCT writer FROM extents WHERE writer > 0")
        }
        freed = 0
        for pid in pids - {os.getpid()}:
            if not _alive(pid):
                db.execute("DELETE FROM pins WHERE pid = ?", (pid,))
                freed += db.execute("DELETE FROM extents WHERE writer = ?", (pid,)).rowcount
        return freed

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                self._apply_releases(db)
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")


def _first_fit(db: sqlite3.Connection, span: int, capacity: int) -> int | None:
    end = 0
    for off, size in db.execute("SELECT off, size FROM extents ORDER BY off"):
        if off - end >= span:
            return end
        end = max(end, off + _round_up(size))
    return end if capacity - end >= span else None


def _round_up(n: int) -> int:
    return -(-n // PAGE) * PAGE


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- one arena per directory per process ----------------------------------------------------------

_arenas: dict[Path, Arena] = {}
_arenas_lock = threading.Lock()
#: Arenas a forked child inherited: kept referenced (closing the parent's SQLite connection in
#: the child is unsafe) and never used again.
_inherited: list[Arena] = []


def arena_at(root: Path) -> Arena:
    """This process's view of the arena in `root`, opened (and created) on first use."""
    arena = _arenas.get(root)
    if arena is None:
        with _arenas_lock:
            arena = _arenas.get(root)
            if arena is None:
                arena = _arenas[root] = Arena(root, default_capacity(root))
    return arena


def close_arena(root: Path) -> None:
    """Unmap and forget this process's arena in `root` (a bench or test that deletes the folder
    gives its memory back). Views still in use keep the mapping alive until they go."""
    with _arenas_lock:
        arena = _arenas.pop(root, None)
    if arena is not None:
        arena.close()


def _after_fork_in_child() -> None:
    global _arenas_lock
    _inherited.extend(_arenas.values())
    _arenas.clear()
    _arenas_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
