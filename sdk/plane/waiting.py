"""The two waits every transport makes, decided once: until a value is ready, and for room.

The embedded plane waits on its waker in this thread, the server on the same waker in its event
loop, and the HTTP client in requests the server holds; the loops differ only in how they sleep.
What they share, and what must agree across planes, is decided here: when a wait is over, and
how long a submit refused by a full `on_full: block` queue waits before it tries again; and,
for calls safe to repeat, how long a client rides out an unreachable plane.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TypeVar

from ..errors import QueueFullError, Unavailable

T = TypeVar("T")

#: A waiter re-checks the store at least this often even when no wake-up arrives: the safety
#: net for a lost datagram, never the mechanism. Defined here, not in wakeup.py, so that a
#: client that only waits over HTTP loads no wake-up machinery (sockets, secrets).
SAFETY_POLL_S = 1.0

#: The first pause before a request that met an outage is sent again; it doubles up to the last.
OUTAGE_RETRY_FIRST_S, OUTAGE_RETRY_MAX_S = 0.05, 1.0


class Deadline:
    """`wait_s` from now, capped; `remaining()` never goes below zero."""

    def __init__(self, wait_s: float, cap_s: float = math.inf) -> None:
        self.at = time.monotonic() + min(max(wait_s, 0.0), cap_s)

    def remaining(self) -> float:
        return max(0.0, self.at - time.monotonic())

    @property
    def passed(self) -> bool:
        return time.monotonic() >= self.at

    def nap(self, hint_s: float | None = None) -> float:
        """The next sleep: the time left, at most `hint_s` and the safety poll."""
        poll = SAFETY_POLL_S  # read per call: a test may lengthen it to prove a wake-up woke it
        return min(self.remaining(), poll if hint_s is None else hint_s, poll)


def room_wait(full: QueueFullError, deadline: Deadline) -> float:
    """How long to wait for room before submitting again; re-raises `full` when the queue
    rejects (not blocks) or the caller's time is up.

    Room comes from a claim (a wake-up) or, under a rate limit, from time: the refusal says when.
    """
    if not full.block or deadline.passed:
        raise full
    return deadline.nap(full.retry_after_s or None)


def through_outages(call: Callable[[], T], timeout_s: float) -> T:
    """`call()`, made again while the plane is unreachable, for up to `timeout_s`; then the
    outage's own error. Only for calls that are safe to repeat: a read from a cursor, a submit
    or a post whose ids the client minted."""
    deadline = time.monotonic() + timeout_s
    pause = OUTAGE_RETRY_FIRST_S
    while True:
        try:
            return call()
        except Unavailable:
            if time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)  # a backoff between attempts: no wake-up crosses an outage
            pause = min(pause * 2, OUTAGE_RETRY_MAX_S)
