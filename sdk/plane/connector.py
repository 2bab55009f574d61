"""The seam between the plane's semantics and a database engine.

A connector runs named statements inside transactions and says when other processes changed
something; that is all the store needs from an engine (procrastinate's connector, in spirit).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from .queries import Dialect
from .wakeup import Waker

T = TypeVar("T")

Row = dict[str, Any]


class Transaction(Protocol):
    def all(self, query: str, **params: Any) -> list[Row]:
        """Run a named statement; its rows (or RETURNING rows)."""

    def one(self, query: str, **params: Any) -> Row | None:
        """Run a named statement; its first row or None."""

    def batch(self, statements: Sequence[tuple[str, Mapping[str, Any]]]) -> list[list[Row]]:
        """Run named statements none of whose parameters hang on another's answer, in order;
        each one's rows. A database across a network gets them in one round trip."""


class Connector(Protocol):
    dialect: Dialect
    waker: Waker
    #: What is wrong with the database, once it was found damaged (/readyz says it).
    problem: str | None

    def run_if_free(self, fn: Callable[[], T], *, durable: bool = False) -> tuple[bool, T | None]:
        """Run a write on this thread if it need not wait for anyone: (True, its value); else
        (False, None) at once (always, for a database across a network). `durable`: `fn`
        commits with an fsync, so it runs here only while the disk answers quickly."""

    @property
    def reads_inline(self) -> bool:
        """Whether a read transaction may run on an event loop: it never waits for a writer and
        crosses no network (the server then skips the thread-pool hop for it)."""

    def quick_check(self) -> str | None:
        """A quick integrity check of the database: None when sound, else what is wrong."""

    def transaction(
        self, *, write: bool = True, durable: bool = True, sync_later: bool = False
    ) -> AbstractContextManager[Transaction]:
        """A transaction that commits on exit and rolls back on an exception.

        `write=True` takes the write lock up front (SQLite BEGIN IMMEDIATE), so a claim never
        fails half-way on a lock upgrade. `durable=False` commits without waiting for the disk:
        a power cut may undo it (never corrupt it), so it is only for writes whose loss repeats
        work rather than losing any: a claim undone just runs its job again.

        `sync_later=True` (a durable write) commits without waiting for the disk too, and owes
        the wait: the caller tells nobody the write happened until `sync(mark())` has returned.
        A submit-and-wait owes its fsync this way and the ack that ends its job pays it: one
        fsync on the call's path instead of two. A connector that cannot split a commit from
        its flush (Postgres) commits durably at once.
        """

    def mark(self) -> int:
        """A mark past every write this connector has committed so far (for `sync`)."""

    def synced(self, mark: int) -> bool:
        """Whether every write up to `mark` is on disk already (`sync` then returns at once)."""

    def sync(self, mark: int) -> None:
        """Put every write up to `mark` on disk: nothing when a durable commit since has
        carried it there, else one flush of the log."""

    def close(self) -> None: ...
