"""Telling an unreachable plane from a refusal, and backing off while it is unreachable.

A worker on a GPU box outlives network blips and control-plane restarts: while the plane cannot be
reached it keeps its jobs running and retries with jittered exponential backoff. A *refusal*
(`LeaseLost`, `NotFound`, bad input) is an answer, not an outage, and is never retried.

A burst run is different: somebody waits for it to end, so it gives up once the plane has been
unreachable for `give_up_s` (`PlaneUnreachable`), where a serving daemon waits for ever. Either
way the log says what is retried: a line when an outage begins, another every so often while it
lasts (often when somebody waits for a burst run, seldom for a daemon riding out the night).
"""

from __future__ import annotations

import math
import random
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from dreamlake.lakeshore.errors import DispatchError, Unavailable

if TYPE_CHECKING:
    from dreamlake.lakeshore.work.observer import WorkerObserver

T = TypeVar("T")

#: Backoff bounds while the plane is unreachable.
BACKOFF_BASE_S = 0.2
BACKOFF_CAP_S = 10.0
#: While an outage lasts, the log says so again this often: for a run that gives up, and for one
#: that waits for ever.
REMIND_GIVING_UP_S = 5.0
REMIND_WAITING_S = 60.0


class PlaneUnreachable(Unavailable):
    """A burst run gave up: the plane could not be reached for as long as it waits."""


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
    """Plane calls while the plane may be away: a log line when an outage of a call begins and
    a reminder now and then, not one per try; with `give_up_s`, `PlaneUnreachable` once an
    outage has lasted that long (`check`)."""

    def __init__(
        self, log: Any, *, give_up_s: float | None = None, observer: WorkerObserver | None = None
    ) -> None:
        self._log = log
        #: Told of every failed try (the log hears of the first of an outage only).
        self._observer = observer
        self.give_up_s = give_up_s
        self._since: dict[str, float] = {}  # the plane calls failing right now: since when
        self._remind_at: dict[str, float] = {}

    def backoff(self) -> Backoff:
        return Backoff()

    def call(
        self,
        what: str,
        call: Callable[[], T],
        *,
        give_up: threading.Event | None = None,
        attempts: int | None = None,
        bounded: bool = False,
    ) -> T:
        """Call until it answers, backing off while unreachable.

        Raises a refusal at once; `GaveUp` once `give_up` is set; the last failure after
        `attempts` tries; with `bounded`, `PlaneUnreachable` once the outage outlasts
        `give_up_s`.
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
                if bounded:
                    self.check(what, exc)
                if attempts is not None and backoff.failures + 1 >= attempts:
                    raise
                pause = self.pause(what, backoff) if bounded else backoff.next()
                if stop.wait(pause):
                    raise GaveUp(what) from exc
                continue
            self.reachable(what)
            return value

    def unreachable(self, what: str, exc: BaseException) -> None:
        if self._observer is not None:
            self._observer.plane_error(what, "unreachable")
        now = time.monotonic()
        since = self._since.setdefault(what, now)
        if now < self._remind_at.get(what, 0.0) or (since < now and self.left_s(what) == 0):
            return  # reminded lately, or about to give up (which says it all)
        remind = REMIND_WAITING_S if self.give_up_s is None else REMIND_GIVING_UP_S
        self._remind_at[what] = now + remind
        if self.give_up_s is None:
            then = "retrying until it answers"
        else:
            then = f"retrying for {math.ceil(self.left_s(what))} s more, then giving up"
        event = "plane.unreachable" if since == now else "plane.still_unreachable"
        self._log.warning(event, call=what, error=str(exc), for_s=round(now - since, 1), then=then)

    def left_s(self, what: str) -> float:
        """How long an outage of `what` may last yet before a bounded call gives up."""
        since = self._since.get(what)
        if self.give_up_s is None or since is None:
            return math.inf
        return max(0.0, since + self.give_up_s - time.monotonic())

    def pause(self, what: str, backoff: Backoff) -> float:
        """A bounded call's next backoff: its last try falls on the bound, not a backoff past
        it, and tries (so reminders) come at least every REMIND_GIVING_UP_S. Unbounded, the
        backoff as it is."""
        pause = backoff.next()
        if self.give_up_s is None:
            return pause
        return min(pause, self.left_s(what), REMIND_GIVING_UP_S)

    def check(self, what: str, exc: BaseException) -> None:
        """Raise `PlaneUnreachable` if `what` has failed for `give_up_s` or longer."""
        if self.left_s(what) == 0:
            raise PlaneUnreachable(
                f"gave up after {self.give_up_s:g} s without an answer from the plane "
                f"({what}: {exc})"
            ) from exc

    def reachable(self, what: str) -> None:
        if self._since.pop(what, None) is not None:
            self._remind_at.pop(what, None)
            self._log.info("plane.reconnected", call=what)
