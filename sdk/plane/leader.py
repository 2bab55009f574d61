"""Leader election for singletons (the elastic controller): one holder of a name at a time.

No home-made protocol: on Postgres a session advisory lock (`postgres.advisory_leader`), on one
box an exclusive `flock` on a file beside the SQLite database. Both are released by the kernel or
the server when the holder closes, exits or dies, so a crashed leader is replaced without a lease
timeout of ours. Both offer the same three calls: `try_acquire()` (take it, or confirm it is still
held, before acting), `is_leader` (what the last attempt found) and `close()`.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import socket
from pathlib import Path
from types import TracebackType
from typing import Protocol

from dreamlake.lakeshore.errors import InvalidArgument

_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class Leader(Protocol):
    @property
    def is_leader(self) -> bool: ...

    def try_acquire(self) -> bool: ...

    def close(self) -> None: ...


class FileLeader:
    """An exclusive, non-blocking `flock` on `<database>.leader-<key>`.

    flock locks belong to the open file, not to the process: a second `FileLeader` on the same
    key loses even inside the holder's process, and the lock dies with the holder's descriptor.
    Local filesystems only (flock over NFS is not reliable); beyond one box use Postgres.
    """

    def __init__(self, database: str | os.PathLike[str], key: str) -> None:
        if not _KEY.fullmatch(key):
            raise InvalidArgument(f"leader key must match {_KEY.pattern}, got {key!r}")
        self.key = key
        self.path = Path(f"{os.fspath(database)}.leader-{key}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = None
        self.try_acquire()

    @property
    def is_leader(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        if self._fd is not None:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())  # who leads, for a human looking
        self._fd = fd
        return True

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the lock; the file stays (unlinking it would race)
            self._fd = None

    def __enter__(self) -> FileLeader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def leader_for(target: str | os.PathLike[str], key: str) -> Leader:
    """Contend for `key` on the plane at `target` (a `postgresql://` URL or a SQLite path)."""
    text = os.fspath(target)
    if text.startswith(("postgresql://", "postgres://")):
        from .postgres import advisory_leader

        return advisory_leader(text, key)
    if text == ":memory:":
        raise InvalidArgument("an in-memory plane has no other process to lead: use a file")
    return FileLeader(text, key)


class Leases(Protocol):
    def acquire_leadership(self, name: str, holder: str, ttl_s: float) -> bool: ...
    def release_leadership(self, name: str, holder: str) -> None: ...


class LeaseLeader:
    """Leadership as a lease in the store, renewed by each `try_acquire` (each tick).

    For controllers that reach the plane over HTTP (`HttpFleet`) and so hold no lock on the
    database: the holder keeps the lease while it ticks; a holder that stops ticking loses it
    after `ttl_s`, and a standby takes over at its next try. `ttl_s` must outlast the interval
    between tries.
    """

    def __init__(
        self, leases: Leases, key: str, *, ttl_s: float, holder: str | None = None
    ) -> None:
        if not _KEY.fullmatch(key):
            raise InvalidArgument(f"leader key must match {_KEY.pattern}, got {key!r}")
        self.key = key
        self.ttl_s = ttl_s
        self.holder = holder or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        self._leases = leases
        self._leading = False

    @property
    def is_leader(self) -> bool:
        return self._leading

    def try_acquire(self) -> bool:
        self._leading = self._leases.acquire_leadership(self.key, self.holder, self.ttl_s)
        return self._leading

    def close(self) -> None:
        if self._leading:
            self._leases.release_leadership(self.key, self.holder)
            self._leading = False
