"""Group commit for acks: what finished while one batch was in flight goes out in the next.

A no-op job costs the plane a durable commit to claim and another to settle; on a busy daemon
the settles are the half that can share a commit without delaying anyone: a slot hands its
result here and takes its next job at once, and one thread sends whatever has gathered as a
single `ack_many`. Nothing is lost by the wait: until the batch commits the job is still running
under its lease, and a daemon that dies first leaves it to lease expiry and a re-run, exactly as
a single ack that never arrived would.

Only successes batch. Failures, kills and releases stay single calls: they are rare, and each
writes a journal frame the caller may be streaming.

Riding: while the claim loop is parked waiting for a free slot (`riding(True)`), a success is
put aside for it instead of for the sending thread. The slot that finished is what frees room,
so the claim loop wakes next and sends the acks with its claim (`plane.ack_and_claim`): one
request and, when a job is waiting, one commit per job instead of two. Whatever it does not
take goes back to the sending thread (`unride`), and `close` sends every rider too.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from dreamlake.lakeshore.types import Ack, Claim

#: Most acks in one request (the plane takes up to 1,000).
MAX_ACKS = 256
#: Most result bytes in one request: a batch stays far below the server's 64 MiB body limit.
MAX_ACK_BYTES = 8 * 1024 * 1024
#: While the daemon has more jobs in hand, a batch waits up to this long for company: a
#: no-op job ends every fraction of a millisecond, and a request per one or two acks made the
#: control plane's per-request cost the limit of a drain. An idle daemon sends at once.
ACK_LINGER_S = 0.005


class AckQueue:
    """Successes waiting for their batch; `take()` blocks for the next one, `idle` waits."""

    def __init__(self) -> None:
        self._items: deque[tuple[Claim, Ack]] = deque()
        self._riders: list[tuple[Claim, Ack]] = []
        self._riding = False
        lock = threading.Lock()
        #: The sending thread waits on `_cond` for acks to send; `wait_idle` on `_idle` for
        #: sent batches. Apart, a batch that rode on a claim wakes no sending thread for nothing.
        self._cond = threading.Condition(lock)
        self._idle = threading.Condition(lock)
        self._in_flight = 0
        self._closed = False

    def put(self, claim: Claim, result: bytes | None) -> None:
        with self._cond:
            item = (claim, Ack(claim.id, claim.lease, result))
            if self._riding and not self._closed and len(self._riders) < MAX_ACKS:
                self._riders.append(item)
                return
            self._items.append(item)
            self._cond.notify_all()

    def riding(self, on: bool) -> None:
        """Whether the next successes wait for the claim loop (while it waits for room)."""
        with self._cond:
            self._riding = on

    def take_riders(self) -> list[tuple[Claim, Ack]]:
        """The successes put aside for the claim loop; `done` them once sent, as a batch."""
        with self._cond:
            riders, self._riders = self._riders, []
            self._in_flight += len(riders)
            return riders

    def take_all(self, timeout: float) -> list[tuple[Claim, Ack]]:
        """Every success not yet committed, for a claim whose offer counts their resources free
        again: a batch the sending thread has in flight is waited for (up to `timeout`), and the
        rest ride on the claim, so each ack commits no later than the start of the job that
        takes its GPUs. `done` them once sent, as `take_riders`'."""
        with self._idle:
            self._idle.wait_for(lambda: not self._in_flight, timeout)
            riders = [*self._riders, *self._items]
            self._riders = []
            self._items.clear()
            self._in_flight += len(riders)
            return riders

    def unride(self, batch: list[tuple[Claim, Ack]] | None = None) -> None:
        """Hand `batch` (taken but not sent: its request failed) and every rider still put
        aside to the sending thread. Sending an ack twice is harmless: the plane answers a
        repeat of a settle that landed as it answered the first."""
        with self._cond:
            self._items.extend(batch or ())
            self._items.extend(self._riders)
            self._riders = []
            self._riding = False
            self._cond.notify_all()

    def take(self, busy: Callable[[], bool] = lambda: False) -> list[tuple[Claim, Ack]] | None:
        """The next batch (at least one ack), or None once closed and empty.

        While `busy()` (more jobs are about to end), wait up to ACK_LINGER_S for a fuller batch.
        """
        with self._cond:
            while not self._items:
                if self._closed:
                    return None
                self._cond.wait()
            if busy() and not self._closed:
                deadline = time.monotonic() + ACK_LINGER_S
                while len(self._items) < MAX_ACKS and not self._closed and busy():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
            batch: list[tuple[Claim, Ack]] = []
            size = 0
            while self._items and len(batch) < MAX_ACKS:
                result = self._items[0][1].result
                n = len(result) if result else 0
                if batch and size + n > MAX_ACK_BYTES:
                    break
                batch.append(self._items.popleft())
                size += n
            self._in_flight += len(batch)
            return batch

    def done(self, batch: list[tuple[Claim, Ack]]) -> None:
        """The batch was sent (or given up on): `wait_idle` may return."""
        with self._cond:
            self._in_flight -= len(batch)
            self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Block until every ack put so far has been sent; False on timeout."""
        with self._idle:
            return self._idle.wait_for(
                lambda: not self._items and not self._riders and not self._in_flight, timeout
            )

    def close(self) -> None:
        """`take` returns None once the queue is empty: the sending thread exits."""
        with self._cond:
            self._closed = True
            self._items.extend(self._riders)
            self._riders = []
            self._cond.notify_all()
