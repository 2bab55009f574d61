"""When a worker renews its leases: on a thread and a clock of their own, well before expiry.

A lease the plane grants runs `lease_s` from when the plane handled the claim or the last
renewal, and the plane's sweeper (every second on the server, and on the way of claims) takes
back every lease past its end. The worker must therefore get a renewal committed within every
`lease_s` window, whatever else it is doing, and the only way to be sure under load is to try
early and to try again at once:

- a renewal goes out a third of the lease after the last one that was answered was *sent* (the
  plane's clock started no earlier than that), and at least every `KILL_POLL_S` (the same call
  brings kill requests); how long the call itself took does not push the next one back, so a
  slow answer is followed at once by the next renewal, not by a full period of waiting;
- a renewal that failed (plane unreachable, busy) is sent again after a short backoff, so a
  lease lives through two more tries before the sweeper could take it;
- nothing else shares the thread. The worker row's heartbeat (load figures from psutil, which
  walks /proc, and a plane call of its own) used to run on the same thread between renewals:
  on a box saturated by CPU-bound jobs it took seconds, every renewal waited behind it, and a
  1.5 s lease expired under a job that was running fine (issue 33, item 2).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

#: Leases are renewed (and kill requests read) at least this often while a job runs.
KILL_POLL_S = 1.0
#: A renewal goes out this fraction of the lease after the last answered one was sent.
RENEW_FRACTION = 1 / 3
#: After a failed renewal, the next one goes out after this fraction of the period, doubling.
RETRY_FRACTION = 1 / 8


class RenewalSchedule:
    """When the next renewal is due, from when answered ones were sent and failures since."""

    def __init__(self, lease_s: float, *, now: float) -> None:
        self.lease_s = lease_s
        self.every_s = min(lease_s * RENEW_FRACTION, KILL_POLL_S)
        self.due_at = now + self.every_s
        self.failures = 0

    def answered(self, sent_at: float) -> None:
        """A renewal sent at `sent_at` was answered: the leases run from no earlier than that."""
        self.failures = 0
        self.due_at = sent_at + self.every_s

    def failed(self, now: float) -> None:
        """A renewal got no answer: try again soon, backing off up to the normal period."""
        self.failures += 1
        retry_s = self.every_s * RETRY_FRACTION * 2 ** (self.failures - 1)
        self.due_at = now + min(retry_s, self.every_s)

    def wait_s(self, now: float) -> float:
        return max(0.0, self.due_at - now)

    def slow(self, took_s: float) -> bool:
        """An answer this slow put the leases at risk: a third of them was spent waiting."""
        return took_s > self.lease_s * RENEW_FRACTION


def keep_leases(
    renew: Callable[[], bool],
    halt: threading.Event,
    lease_s: float,
    *,
    ticked: Callable[[float], None],
    slow: Callable[[float], None],
    now_please: threading.Event | None = None,
) -> None:
    """Renew until `halt` is set: `renew()` sends one renewal and says whether it was answered.

    `ticked(now)` marks progress for the watchdog on every round; `slow(took_s)` hears of an
    answer that took more than a third of the lease (the worker logs it: it is the warning
    that comes before a lost lease). `now_please`, once set, has the next renewal go at once
    (the server pushed that a kill was asked: the renewal's answer says which job); whoever
    sets `halt` sets it too, so that the loop ends at once.
    """
    schedule = RenewalSchedule(lease_s, now=time.monotonic())
    wake = now_please if now_please is not None else halt
    while True:
        wake.wait(schedule.wait_s(time.monotonic()))
        if halt.is_set():
            return
        if now_please is not None:
            now_please.clear()
        sent_at = time.monotonic()
        ticked(sent_at)
        answered = renew()
        now = time.monotonic()
        if answered:
            schedule.answered(sent_at)
        else:
            schedule.failed(now)
        if schedule.slow(now - sent_at):
            slow(now - sent_at)
