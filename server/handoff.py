"""Claims held on this server, so that a submit can hand them its jobs in its own transaction.

A claim long-poll that found nothing takes a `Seat` under its queues' work keys. A submit to one
of those queues takes seats (oldest first) and claims for them inside the transaction that
inserts its jobs (`SqlStore.submit_handing`): one commit instead of two, and the claimer answers
without reading the store again. A seat is only ever taken on the event loop, so a seat is
handed to one submit at most; the claimer then waits for that submit's write to finish, which
may hand it nothing (another claim was first, the job is held for another host, the write
failed) — it goes back to its long-poll.

Results travel the other way the same way: a submit-and-wait holds a `Reader` for its invocation
(`Readers`), and an ack on this server that ends it hands over the row its settle statement
returned, so the waiter answers without reading the store again. A wait that nobody hands
anything to (the ack went to another replica, or came before the reader sat down) reads the
store when woken, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from dreamlake.lakeshore.types import Claim, ClaimArgs, Invocation


class Seat:
    """One held claim: what it asks for, and how it learns what a submit handed it."""

    __slots__ = ("args", "dismissed", "handed", "keys", "ns", "wake")

    def __init__(
        self, ns: str, args: ClaimArgs, keys: Sequence[str], loop: asyncio.AbstractEventLoop
    ):
        self.ns = ns
        self.args = args
        self.keys = tuple(keys)
        #: Set when its worker said it is draining (`Seats.dismiss`): the claim answers empty.
        self.dismissed = False
        #: Resolves the claimer's wait on the store's waker (`Waker.wait_async(wake=...)`).
        self.wake: asyncio.Future[None] = loop.create_future()
        #: Set when a submit took the seat; resolved with the claims once its write is over.
        self.handed: asyncio.Future[list[Claim]] | None = None


class Seats:
    """The seats of this server's claim long-polls, per work key, oldest first."""

    def __init__(self) -> None:
        self._by_key: dict[str, dict[Seat, None]] = {}

    @contextlib.contextmanager
    def held(self, ns: str, args: ClaimArgs, keys: Sequence[str]) -> Iterator[Seat]:
        """A seat for the length of one wait; gone from every key when the wait ends."""
        seat = Seat(ns, args, keys, asyncio.get_running_loop())
        for key in seat.keys:
            self._by_key.setdefault(key, {})[seat] = None
        try:
            yield seat
        finally:
            self._leave(seat)

    def take(self, key: str, jobs: int) -> list[Seat]:
        """Seats under `key` whose limits add up to `jobs` at most (at least one, if any)."""
        taken: list[Seat] = []
        room = 0
        for seat in list(self._by_key.get(key, ())):
            if taken and room + seat.args.limit > jobs:
                break
            self._leave(seat)
            seat.handed = asyncio.get_running_loop().create_future()
            taken.append(seat)
            room += seat.args.limit
            if room >= jobs:
                break
        return taken

    def dismiss(self, ns: str, worker: str) -> int:
        """Let go of `worker`'s waiting claims, which then answer with nothing at once: it said
        it is draining, and would only give back what a submit handed it. Without this an idle
        daemon's stop waited out its claim's long-poll. Returns how many were let go."""
        seats = {
            seat
            for waiting in self._by_key.values()
            for seat in waiting
            if seat.ns == ns and seat.args.worker == worker
        }
        for seat in seats:
            self._leave(seat)  # no submit takes it from here on
            seat.dismissed = True
            if not seat.wake.done():
                seat.wake.set_result(None)
        return len(seats)

    def _leave(self, seat: Seat) -> None:
        for key in seat.keys:
            waiting = self._by_key.get(key)
            if waiting is not None:
                waiting.pop(seat, None)
                if not waiting:
                    del self._by_key[key]


def hand(seats: Sequence[Seat], claims: Sequence[list[Claim]] | None) -> list[Claim]:
    """Tell each taken seat what it got (None: the write failed, nothing); the claims of
    seats whose claimer is gone, for the caller to release."""
    orphaned: list[Claim] = []
    for i, seat in enumerate(seats):
        got = claims[i] if claims is not None else []
        assert seat.handed is not None
        if seat.handed.done():  # cancelled: its request was torn down while it waited
            orphaned += got
            continue
        seat.handed.set_result(got)
        if not seat.wake.done():
            seat.wake.set_result(None)
    return orphaned


class Reader:
    """One submit-and-wait's wait for its invocation to end."""

    __slots__ = ("ended", "wake")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        #: Resolves the reader's wait on the store's waker, as `Seat.wake` does.
        self.wake: asyncio.Future[None] = loop.create_future()
        #: The invocation as the ack that ended it left it.
        self.ended: Invocation | None = None

    def armed(self) -> asyncio.Future[None]:
        """The future for the next wait: a fresh one once the waker resolved the last (another
        invocation ended), the resolved one once this invocation was handed over."""
        if self.wake.done() and self.ended is None:
            self.wake = asyncio.get_running_loop().create_future()
        return self.wake


class Readers:
    """The readers of this server's submit-and-waits, by invocation id."""

    def __init__(self) -> None:
        self._by_id: dict[str, list[Reader]] = {}

    @contextlib.contextmanager
    def awaiting(self, inv_id: str) -> Iterator[Reader]:
        reader = Reader(asyncio.get_running_loop())
        self._by_id.setdefault(inv_id, []).append(reader)
        try:
            yield reader
        finally:
            waiting = self._by_id.get(inv_id)
            if waiting is not None:
                waiting.remove(reader)
                if not waiting:
                    del self._by_id[inv_id]

    def handing(self, ids: Iterable[str]) -> Callable[[Mapping[str, Invocation]], None] | None:
        """The store's `on_ended` for settles of `ids`: None when no reader here awaits one of
        them. It may be called on a store thread; the handing-over happens on the loop, queued
        ahead of the wake-up the commit sends (or at once, when the write ran on the loop), so a
        woken reader finds its row there."""
        if not any(i in self._by_id for i in ids):
            return None
        loop = asyncio.get_running_loop()

        def on_ended(ended: Mapping[str, Invocation]) -> None:
            if asyncio._get_running_loop() is loop:  # a write run on the loop (`run_write`)
                self.hand(ended)
            else:
                loop.call_soon_threadsafe(self.hand, ended)

        return on_ended

    def hand(self, ended: Mapping[str, Invocation]) -> None:
        for inv_id, inv in ended.items():
            for reader in self._by_id.get(inv_id, ()):
                reader.ended = inv
                if not reader.wake.done():
                    reader.wake.set_result(None)
