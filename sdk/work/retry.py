"""Telling an unreachable plane from a refusal, and backing off while it is unreachable.

A worker on a GPU box outlives network blips and control-plane restarts: while the plane cannot be
reached it keeps its jobs running and retries with jittered exponential backoff. A *refusal*
(`LeaseLost`, `NotFound`, bad input) is an answer, not an outage, and is never retried.
"""

from __future__ import annotations

import random
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import DispatchError, Unavailable

T = TypeVar("T")

#: Backoff bounds while the plane is unreachable.
BACKOFF_BASE_S = 0.2
BACKOFF_CAP_S = 10.0


def is_transient(exc: BaseException) -> bool:
    """True for failures worth retrying: no connection, a timeout, a busy database, a 5xx."""
    if isinstance(exc, DispatchError):
        return isinstance(exc, Unavailable) or exc.status >= 500
    return isinstance(exc, (OSError, TimeoutError, sqlite3.OperationalError))


class Backoff:
    """Full-jitter exponential backoff (AWS architecture blog): spreads a fleet's reconnects."""

    def __init__(self, base_s: float = BACKOFF_BASE_S, cap_s: float = BACKOFF_CAP_S) -> None:
        self.base_s = base_s
        self.cap_s = cap_s
        self.failures = 0

    def next(self) -> float:
        self.failures += 1
        ceiling = min(self.cap_s, self.base_s * 2 ** (self.failures - 1))
        return random.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.failures = 0


class GaveUp(Exception):
    """A plane call abandoned because the worker is stopping at once."""


class Retrier:
    """Plane calls while the plane may be away: one log line per outage per call, not per try."""

    def __init__(self, log: Any) -> None:
        self._log = log
        self._outage: set[str] = set()  # the plane calls failing right now

    def backoff(self) -> Backoff:
        return Backoff()

    def call(
        self,
        what: str,
        call: Callable[[], T],
        *,
        give_up: threading.Event | None = None,
        attempts: int | None = None,
    ) -> T:
        """Call until it answers, backing off while unreachable.

        Raises a refusal at once; `GaveUp` once `give_up` is set; the last failure after
        `attempts` tries.
        """
        stop = give_up if give_up is not None else threading.Event()
        backoff = Backoff()
        while True:
            try:
                value = call()
            except Exception as exc:
                if not is_transient(exc):
                    raise
                self.unreachable(what, exc)
                if attempts is not None and backoff.failures + 1 >= attempts:
                    raise
                if stop.wait(backoff.next()):
                    raise GaveUp(what) from exc
                continue
            self.reachable(what)
            return value

    def unreachable(self, what: str, exc: BaseException) -> None:
        if what not in self._outage:
            self._outage.add(what)
            self._log.warning("plane.unreachable", call=what, error=repr(exc))

    def reachable(self, what: str) -> None:
        if what in self._outage:
            self._outage.discard(what)
            self._log.info("plane.reconnected", call=what)
