"""Group commit for acks: what finished while one batch was in flight goes out in the next.

A no-op job costs the plane a durable commit to claim and another to settle; on a busy daemon
the settles are the half that can share a commit without delaying anyone: a slot hands its
result here and takes its next job at once, and one thread sends whatever has gathered as a
single `ack_many`. Nothing is lost by the wait: until the batch commits the job is still running
under its lease, and a daemon that dies first leaves it to lease expiry and a re-run, exactly as
a single ack that never arrived would.

Only successes batch. Failures, kills and releases stay single calls: they are rare, and each
writes a journal frame the caller may be streaming.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from ..types import Ack, Claim

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
        self._cond = threading.Condition()
        self._in_flight = 0
        self._closed = False

    def put(self, claim: Claim, result: bytes | None) -> None:
        with self._cond:
            self._items.append((claim, Ack(claim.id, claim.lease, result)))
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
            self._cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Block until every ack put so far has been sent; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._items and not self._in_flight, timeout)

    def close(self) -> None:
        """`take` returns None once the queue is empty: the sending thread exits."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
