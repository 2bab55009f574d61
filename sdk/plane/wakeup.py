"""Wake-ups: how a waiting claim, result or stream learns that something changed.

Nobody sleeps in a poll loop where a wake-up exists. A `Waker` is a generation counter: a waiter
reads the generation, checks the store, and if nothing is there waits for the generation to move.
Writers bump it after they commit. Waiters may be threads (the SDK) or asyncio tasks (the server,
where a held long-poll must cost no thread).

Across processes on one box (the embedded SQLite plane) the bump travels as a datagram on a Unix
socket, naming the work keys it concerns: each process that waits binds one socket and drops a
marker file naming it in `<db>.wake/`; a writer sends to every marker it finds. A dead
process's marker is removed by the first writer whose send is refused. Postgres feeds the same
`Waker` from LISTEN/NOTIFY.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from .waiting import SAFETY_POLL_S as SAFETY_POLL_S  # the waits' own; named here as before

if TYPE_CHECKING:  # only async waiters (the server) use it: a producer never imports asyncio
    import asyncio

#: A timed wake-up rings this much after its time, so the claim it wakes finds the time passed.
ALARM_SLACK_S = 0.002
_ABSTRACT_SOCKETS: bool = sys.platform == "linux"
#: The largest wake-up datagram sent or read: keys past it are sent as "anything".
MAX_DATAGRAM = 4096


class Relay(Protocol):
    """Carries wake-ups to other processes: `CrossProcessWaker` here, LISTEN/NOTIFY in postgres."""

    def send(self, keys: frozenset[str] | None = None) -> None:
        """Tell the other processes; `keys` as `Waker.notify` computed them (None: anything)."""

    def listen(self, waker: Waker) -> None: ...

    def close(self) -> None: ...


class Waker:
    """A generation counter that sync and async waiters can block on."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._generation = 0
        self._async_waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = set()
        #: Async waiters that only care about new work under some keys (claim long-polls).
        self._interest: dict[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]], frozenset[str]]
        self._interest = {}
        #: Generation of the last wake-up that may have brought work anywhere, and per work key
        #: (`work_key(ns, queue)`) of the last one that brought work there.
        self._any_work = 0
        self._work: dict[str, int] = {}
        #: The same for one invocation's readers (`reader_key`), oldest first and at most
        #: MAX_READER_KEYS of them: one key per invocation ever settled would never stop
        #: growing. A waiter older than the last one let go (`_readers_horizon`) may have missed
        #: its key: it wakes to check, as after any wake-up that may concern it.
        self._readers: dict[str, int] = {}
        self._readers_horizon = 0
        self._relays: list[Relay] = []
        #: Timed wake-ups (`notify_at`): the earliest pending time per work key, and the timers.
        self._alarms: dict[str, float] = {}
        self._timers: set[threading.Timer] = set()

    @property
    def generation(self) -> int:
        return self._generation

    def notify(
        self,
        *,
        local_only: bool = False,
        work: Iterable[str] | None = None,
        reads: bool = True,
        ended: Iterable[str] = (),
    ) -> None:
        """Wake every waiter in this process, and (unless local_only) in the others.

        `work` says where claimable work may have appeared: the keys (`work_key`) of a submit,
        `()` for a change that brings none (an ack, a claim, a frame), None (the default) for
        one that may bring any (a requeue, a queue reopened, another process's commit). An
        async waiter that asked for work under some keys is left asleep when none came there:
        500 idle claim long-polls must not all re-read the store on every commit.

        `reads=False` says the change ended no invocation and posted no frame (a submit, a
        claim): readers waiting on a result or a journal (`READERS`) sleep through it, so a
        `q.call` waiting for its result is not woken when a worker merely claims the job.
        `ended`, with `reads=False`, names the invocations the change ended (an ack): only
        their readers wake (`reader_key`), not each of the server's submit-and-waits to read
        its own row again.
        """
        keys = None
        if work is not None:
            keys = frozenset(work) | (_READS if reads else frozenset())
            keys |= frozenset(reader_key(inv_id) for inv_id in ended)
        with self._cond:
            self._generation += 1
            if keys is None:
                self._any_work = self._generation
            else:
                for key in keys:
                    if key.startswith(_READER_PREFIX):
                        self._readers.pop(key, None)  # the oldest first: the next to go
                        self._readers[key] = self._generation
                    else:
                        self._work[key] = self._generation
                while len(self._readers) > MAX_READER_KEYS:
                    oldest = next(iter(self._readers))
                    self._readers_horizon = self._readers.pop(oldest)
            self._cond.notify_all()
            waiters = [
                entry
                for entry in self._async_waiters
                if keys is None or (want := self._interest.get(entry)) is None or want & keys
            ]
        if waiters:
            _resolve_soon(waiters)
        if not local_only:
            for relay in self._relays:
                relay.send(keys)

    def notify_at(self, at: float, *, work: Iterable[str]) -> None:
        """Wake this process's waiters for `work` at wall-clock time `at`.

        For work that becomes claimable by time alone (a locality window ending): no writer
        commits anything then, so no wake-up would come, and an idle claim would notice only at
        its safety poll. Local only: each process that waits schedules its own. A key keeps its
        earliest pending alarm; a later one is dropped, since the claim that alarm wakes asks
        again when the next one is due.
        """
        now = time.time()
        with self._cond:
            due = frozenset(k for k in work if not now < self._alarms.get(k, 0.0) <= at)
            if not due:
                return
            for key in due:
                self._alarms[key] = at
            timer = threading.Timer(max(0.0, at - now) + ALARM_SLACK_S, self._ring, (at, due))
            timer.daemon = True
            self._timers.add(timer)
        timer.start()

    def _ring(self, at: float, keys: frozenset[str]) -> None:
        with self._cond:
            for key in keys:
                if self._alarms.get(key) == at:
                    del self._alarms[key]
            self._timers = {
                t for t in self._timers if t.is_alive() and t is not threading.current_thread()
            }
        self.notify(local_only=True, work=keys, reads=False)

    def listen(self) -> None:
        """Start receiving other processes' wake-ups (idempotent).

        A waiter calls this before it first reads the store: a wake-up sent between that read
        and its first wait would otherwise go to nobody, and the wait would last a safety poll.
        """
        for relay in self._relays:
            relay.listen(self)

    def wait(self, generation: int, timeout: float, *, work: Iterable[str] | None = None) -> bool:
        """Block until the generation moves past `generation`; with `work`, until a wake-up
        since then may have brought something under those keys. False on timeout.

        The keys keep a waiter asleep through the commits that cannot concern it: a claim
        through its own ack, a result through the claim of its job (as `wait_async`)."""
        self.listen()
        want = None if work is None else frozenset(work)
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._woken(generation, want):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def _woken(self, generation: int, want: frozenset[str] | None) -> bool:
        """Whether a waiter since `generation` for work under `want` (None: any) is done: the
        one test both waits make, in a thread (`wait`) and on an event loop (`wait_async`)."""
        moved = self._generation != generation
        return moved and (want is None or self.work_since(generation, want))

    def work_since(self, generation: int, keys: Iterable[str]) -> bool:
        """Whether a wake-up after `generation` may have brought work under one of `keys`."""
        return self._any_work > generation or any(self._since(k) > generation for k in keys)

    def moved(self, generation: int, key: str) -> bool:
        """Whether `key` itself was notified after `generation` (a wake-up for anything does
        not count): a push is sent for what happened, not for every commit."""
        return self._since(key) > generation

    def _since(self, key: str) -> int:
        if key.startswith(_READER_PREFIX):
            return self._readers.get(key, self._readers_horizon)
        return self._work.get(key, 0)

    async def wait_async(
        self,
        generation: int,
        timeout: float,
        *,
        work: Iterable[str] | None = None,
        wake: asyncio.Future[None] | None = None,
    ) -> bool:
        """Wait for the generation to move; with `work`, only for work under those keys.
        `wake`, a future of the caller's, ends the wait too when someone else resolves it."""
        import asyncio

        self.listen()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = wake if wake is not None else loop.create_future()
        if fut.done():
            return True
        entry = (loop, fut)
        want = None if work is None else frozenset(work)
        with self._cond:
            if self._woken(generation, want):
                return True
            self._async_waiters.add(entry)
            if want is not None:
                self._interest[entry] = want
        # The timer resolves the awaited future itself. asyncio.wait_for (3.11) would wrap it in
        # a second future, and a wake-up would reach this task a turn of the loop later: on a
        # `q.call` over HTTP, three waits each paid that turn on the call's path.
        expired = False

        def expire() -> None:
            nonlocal expired
            if not fut.done():
                expired = True
                fut.set_result(None)

        timer = loop.call_later(timeout, expire)
        try:
            await fut
            return not expired
        finally:
            timer.cancel()
            with self._cond:
                self._async_waiters.discard(entry)
                self._interest.pop(entry, None)

    def relay_through(self, relay: Relay) -> None:
        self._relays.append(relay)

    def close(self) -> None:
        with self._cond:
            timers, self._timers = self._timers, set()
            self._alarms.clear()
        for timer in timers:
            timer.cancel()
        for relay in self._relays:
            relay.close()
        self._relays.clear()


#: The interest of a reader (a result, a journal): woken only by changes that may end an
#: invocation or post a frame. No queue key can collide with it (names have no '*').
READERS = "*readers"
_READS = frozenset({READERS})
_READER_PREFIX = "*read:"
#: How many invocations' reader keys a process remembers (`Waker._readers`): far more than
#: end within one waiter's fetch, so letting the oldest go wakes nobody in practice.
MAX_READER_KEYS = 10_000


def reader_key(inv_id: str) -> str:
    """The key of one invocation's readers: its result's and its journal's. An ack wakes
    only them; everything else that ends an invocation or posts a frame wakes `READERS`,
    which such a reader waits on as well (`reading`)."""
    return _READER_PREFIX + inv_id


def reading(inv_id: str) -> tuple[str, str]:
    """What a reader of one invocation (or of one journal channel) waits for."""
    return (READERS, reader_key(inv_id))


def work_key(namespace: str, queue: str) -> str:
    """The key a submit notifies and a claim long-poll on that queue waits for."""
    return f"{namespace}/{queue}"


def kill_key(namespace: str, worker: str) -> str:
    """The key a kill request for a job `worker` runs notifies, and that worker's channel
    waits for (server/channel.py). No queue key can collide with it (names have no '*')."""
    return f"*kill:{namespace}/{worker}"


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _resolve_soon(waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]) -> None:
    """Resolve each waiter on its loop: a plain `call_soon` on the loop this thread runs (the
    server commits on its loop), which spares the self-pipe write and read that
    `call_soon_threadsafe` makes to wake a loop from another thread."""
    import asyncio  # only a process with async waiters gets here

    here = asyncio._get_running_loop()
    for loop, fut in waiters:
        with contextlib.suppress(RuntimeError):  # loop already closed
            if loop is here:
                loop.call_soon(_resolve, fut)
            else:
                loop.call_soon_threadsafe(_resolve, fut)


class CrossProcessWaker:
    """Datagram wake-ups between the processes that share one SQLite file."""

    def __init__(self, directory: Path) -> None:
        self._dir = directory
        self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._send_sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._send_sock.setblocking(False)
        self._lock = threading.Lock()
        self._peers: list[tuple[str, str]] = []  # (marker file, address)
        self._peers_mtime = -1
        self._own: str | None = None
        self._own_marker: Path | None = None
        self._recv_sock: socket.socket | None = None
        self._closed = False

    # -- the writer side ---------------------------------------------------------------------

    def send(self, keys: frozenset[str] | None = None) -> None:
        """A datagram to every other process naming what changed (`pack_keys`): a waiter
        there re-checks if it may concern it."""
        datagram = pack_keys(keys)
        for marker, address in self._current_peers():
            if address == self._own:
                continue
            try:
                self._send_sock.sendto(datagram, address)
            except BlockingIOError:
                pass  # its buffer is full of wake-ups already: it will wake
            except (ConnectionRefusedError, FileNotFoundError):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(marker)  # nobody listens there any more
            except OSError:
                pass  # one bad peer never fails a commit; the safety poll covers it

    def _current_peers(self) -> list[tuple[str, str]]:
        try:
            mtime = os.stat(self._dir).st_mtime_ns
        except FileNotFoundError:
            return []
        if mtime != self._peers_mtime:
            with self._lock:
                peers = []
                with contextlib.suppress(FileNotFoundError):
                    for entry in os.scandir(self._dir):
                        if entry.name.endswith(".peer"):
                            peers.append((entry.path, _address(self._dir, entry.name[:-5])))
                self._peers, self._peers_mtime = peers, mtime
        return self._peers

    # -- the waiter side ---------------------------------------------------------------------

    def listen(self, waker: Waker) -> None:
        """Start receiving wake-ups for this process (once, on its first wait)."""
        if self._recv_sock is not None or self._closed:
            return
        with self._lock:
            if self._has_listener():
                return
            name = f"{os.getpid()}-{secrets.token_hex(4)}"
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            address = _address(self._dir, name)
            sock.bind(address)
            marker = self._dir / f"{name}.peer"
            marker.touch()
            self._own, self._own_marker, self._recv_sock = address, marker, sock
        thread = threading.Thread(
            target=self._receive, args=(sock, waker), name="lakeshore-wake", daemon=True
        )
        thread.start()

    def _has_listener(self) -> bool:
        return self._recv_sock is not None

    def _receive(self, sock: socket.socket, waker: Waker) -> None:
        while True:
            try:
                data = sock.recv(MAX_DATAGRAM)
            except OSError:
                return
            if self._closed:
                return  # shut down by close(): recv returns b"" from here on
            # `keys` already holds READERS where readers should wake (Waker.notify added it).
            # An empty datagram is another local process's garbage, not the end: it wakes.
            waker.notify(local_only=True, work=unpack_keys(data), reads=False)

    def close(self) -> None:
        self._closed = True
        if self._own_marker is not None:
            with contextlib.suppress(FileNotFoundError):
                self._own_marker.unlink()
        if self._recv_sock is not None:
            with contextlib.suppress(OSError):
                self._recv_sock.shutdown(socket.SHUT_RDWR)
            self._recv_sock.close()
            if not _ABSTRACT_SOCKETS and self._own:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._own)
        self._send_sock.close()


def pack_keys(keys: frozenset[str] | None) -> bytes:
    """A wake-up datagram: `!` when anything may have changed (also what older senders send),
    else `k` and the keys (`Waker.notify`'s, READERS included) one per line. Keys that do not
    fit say `!`: a spurious wake-up costs a re-check, a lost one a safety poll."""
    if keys is None:
        return b"!"
    data = b"k" + "\n".join(sorted(keys)).encode()
    return data if len(data) <= MAX_DATAGRAM else b"!"


def unpack_keys(data: bytes) -> frozenset[str] | None:
    """The keys of a datagram, None (anything) for `!` or for what no sender here writes: any
    local process can send to the socket, and garbage must wake, never fail, the receiver."""
    if data[:1] != b"k":
        return None
    try:
        text = data[1:].decode()
    except UnicodeDecodeError:
        return None
    return frozenset(k for k in text.split("\n") if k)


def _address(directory: Path, name: str) -> str:
    """Linux has abstract sockets: no path-length limit and nothing to clean up."""
    if _ABSTRACT_SOCKETS:
        digest = str(os.stat(directory).st_ino)
        return f"\0lakeshore-{digest}-{name}"
    return str(directory / f"{name}.sock")
