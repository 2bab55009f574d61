"""The two waits every transport makes, decided once: until a value is ready, and for room.

The embedded plane waits on its waker in this thread, the server on the same waker in its event
loop, and the HTTP client in requests the server holds; the loops differ only in how they sleep.
What they share, and what must agree across planes, is decided here: when a wait is over, and
how long a submit refused by a full `on_full: block` queue waits before it tries again; and,
for calls safe to repeat, how long a client rides out an unreachable plane, and how it says so
while it does: a person who typed `lakeshore submit` against a plane that is down should read
what is being retried and for how long, not wait in silence for the error (issue 33, item 7b).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from dreamlake.lakeshore.errors import QueueFullError, Unavailable

T = TypeVar("T")

#: A waiter re-checks the store at least this often even when no wake-up arrives: the safety
#: net for a lost datagram, never the mechanism. Defined here, not in wakeup.py, so that a
#: client that only waits over HTTP loads no wake-up machinery (sockets, secrets).
SAFETY_POLL_S = 1.0

#: The first pause before a request that met an outage is sent again; it doubles up to the last.
OUTAGE_RETRY_FIRST_S, OUTAGE_RETRY_MAX_S = 0.05, 1.0
#: While a call is retried, a line says so at its first retry and then at most this often.
RETRY_REPORT_EVERY_S = 5.0

#: Where a client says what it retries: one WARNING record per report. The CLI prints them on
#: stderr; a program that set up no logging sees them there too (logging's last resort).
CLIENT_LOGGER = "dreamlake.lakeshore.client"


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


class DrainingWorkers:
    """The workers that said, through this client, that they are draining (a heartbeat with
    state "draining"): a claim of theirs stops waiting for work and answers with nothing.

    A draining worker claims nothing more, but the claim it had in flight sat out its whole
    long-poll (`CLAIM_WAIT_S`) before its thread could be joined: an idle daemon took a second
    to stop. The name is forgotten when a worker registers under it again.
    """

    def __init__(self) -> None:
        self._names: set[str] = set()

    def said(self, worker: str, state: str) -> bool:
        """Record a worker's heartbeat state; True if it says it is draining and had not yet
        (a long drain repeats it at every heartbeat: its waiting claim is let go once)."""
        if state != "draining" or worker in self._names:
            return False
        self._names.add(worker)
        return True

    def registered(self, worker: str) -> None:
        self._names.discard(worker)

    def __contains__(self, worker: object) -> bool:
        return worker in self._names

    def claim_done(self, worker: str) -> Callable[[Sequence[object]], bool]:
        """When a claim's wait is over: it got something, or its worker said it is draining."""
        return lambda got: bool(got) or worker in self._names


def room_wait(full: QueueFullError, deadline: Deadline) -> float:
    """How long to wait for room before submitting again; re-raises `full` when the queue
    rejects (not blocks) or the caller's time is up.

    Room comes from a claim (a wake-up) or, under a rate limit, from time: the refusal says when.
    """
    if not full.block or deadline.passed:
        raise full
    return deadline.nap(full.retry_after_s or None)


class RetryReport:
    """The lines a retried call writes: "cannot reach ...; retrying for 28 s more (why)".

    `what` names the call and `why` says why repeating it is safe (so that nobody kills a
    submit for fear of making the job twice); the first retry is reported at once, the next
    ones at most every RETRY_REPORT_EVERY_S, so a 30 s window reads as a few lines.
    """

    def __init__(self, what: str, why: str) -> None:
        self.what = what
        self.why = why
        self._next_at = 0.0

    def retrying(self, error: BaseException, left_s: float) -> None:
        now = time.monotonic()
        if now < self._next_at:
            return
        self._next_at = now + RETRY_REPORT_EVERY_S
        # logging is loaded by the first retry, not with the SDK: it is 7 % of a producer's
        # `import dreamlake.lakeshore`, and most processes never meet an outage.
        import logging

        logging.getLogger(CLIENT_LOGGER).warning(
            "%s; retrying for %s s more (%s %s)",
            error,
            f"{left_s:.0f}" if left_s >= 1 else f"{left_s:.1f}",
            self.what,
            self.why,
        )


def through_outages(
    call: Callable[[], T],
    timeout_s: float,
    *,
    what: str = "the call",
    why: str = "is safe to send again",
) -> T:
    """`call()`, made again while the plane is unreachable, for up to `timeout_s`; then the
    outage's own error. Only for calls that are safe to repeat: a read from a cursor, a submit
    or a post whose ids the client minted. Each retry round is reported (`RetryReport`)."""
    deadline = time.monotonic() + timeout_s
    pause = OUTAGE_RETRY_FIRST_S
    report = RetryReport(what, why)
    while True:
        try:
            return call()
        except Unavailable as exc:
            left = deadline - time.monotonic()
            if pause > left:
                raise
            report.retrying(exc, left)
            time.sleep(pause)  # a backoff between attempts: no wake-up crosses an outage
            pause = min(pause * 2, OUTAGE_RETRY_MAX_S)
