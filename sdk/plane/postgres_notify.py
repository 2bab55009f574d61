"""Wake-ups between processes on one Postgres plane, as LISTEN/NOTIFY.

After the store commits a write it bumps its process's `Waker`; the relay here sends one NOTIFY
per burst, and every other connector on the same schema (other processes, other replicas) bumps
its own `Waker`. Kept apart from the connector (postgres.py) because it is the connector's only
part that runs threads of its own (a sender and a listener, each on its own connection), with
their own reconnects and shutdown; the connector only hands its waker to `NotifyRelay`.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import secrets
import select
import socket
import threading
import time
import weakref
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from .postgres_connect import channel_name, close_quietly, engine, for_role
from .wakeup import Waker

log = logging.getLogger("dreamlake.lakeshore.postgres")

#: The listener re-checks its connection this often when no notification arrives.
LISTEN_HEALTH_S = 10.0
#: Reconnect backoff of the listener and the sender.
BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 5.0
#: At most one NOTIFY per this interval: a burst of commits wakes listeners once, a lone commit
#: at once.
NOTIFY_GAP_S = 0.001
#: How long close() (and interpreter exit) waits for a pending NOTIFY to go out.
FLUSH_S = 2.0
#: How old a sender's count of the other listeners may be (`NotifyRelay._others_listen`). A
#: listener that starts meanwhile announces itself (HELLO) to the listening processes at once;
#: a process that only submits learns of it by the next count, and until then the new
#: listener's waiters notice its commits at their safety poll.
LISTENERS_CHECK_S = 0.5
#: The key of a listener's announcement: it wakes no waiter (no queue or reader is named so).
HELLO = "*hello"


class NotifyRelay:
    """LISTEN/NOTIFY behind a `Waker`: the same duck type as `wakeup.CrossProcessWaker`.

    `send()` never blocks a writer on the database: it raises a request and a sender thread
    (its own connection, synchronous_commit off: a lost NOTIFY costs one safety poll, not data)
    sends one NOTIFY for every burst: the requests that arrived while the previous NOTIFY was in
    flight or less than NOTIFY_GAP_S ago. A request raised after a commit is always followed by
    a NOTIFY sent after it, so a woken listener sees that commit. The payload is this relay's
    token, so its own listener ignores the echo: the writer's process already woke its waiters
    locally.

    `listen()` starts (once) a listener thread on its own autocommit connection. After every
    (re)connect it bumps the waker once, so a waiter re-checks whatever it might have missed
    while nobody listened; a dropped connection is retried with backoff.

    A NOTIFY goes out only while another process listens on the plane (a replica, an embedded
    producer or daemon). One server alone with its HTTP daemons has nobody to tell, and its
    NOTIFY per ack was a tenth of a `q.call`'s CPU: the sender's thread, Postgres queueing
    and delivering it, and this process's own listener reading the echo it then ignored. The
    count of the others comes from pg_stat_activity (the listeners' application_name), at most
    LISTENERS_CHECK_S old; a listener announces itself when it starts, which resets the count
    of every listening process.
    """

    def __init__(self, conninfo: str, schema: str) -> None:
        self._conninfo = conninfo
        self.schema = schema
        self._channel = channel_name(schema)
        self._token = secrets.token_hex(8)
        self._cond = threading.Condition()
        self._requested = 0
        self._sent = 0
        #: What the requests not yet sent may have changed: work keys (and `READERS`), or None
        #: for anything. One NOTIFY carries their union, so another replica wakes only the
        #: waiters they concern (500 idle claims must not re-read on every commit elsewhere).
        self._pending: frozenset[str] | None = frozenset()
        self._closed = threading.Event()
        self._sender: threading.Thread | None = None
        self._listener: threading.Thread | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        #: Set while LISTEN is active (tests wait on it).
        self.listening = threading.Event()
        #: The listener's backend while it is connected, and the name every listener of this
        #: plane connects under (what `other_listeners` counts).
        self._listen_pid = 0
        self._listen_name = conninfo_to_dict(for_role(conninfo, "listen", schema)).get(
            "application_name", ""
        )
        #: (when the others were counted, whether there were any): none counted yet.
        self._others: tuple[float, bool] = (-LISTENERS_CHECK_S, True)
        #: NOTIFYs sent, and sends left out because nobody else listened (tests).
        self.notified = 0
        self.skipped = 0
        _LIVE_RELAYS.add(self)
        _register_exit_flush()

    # -- the writer side -------------------------------------------------------------------

    def send(self, keys: frozenset[str] | None = None) -> None:
        if self._closed.is_set():
            return
        with self._cond:
            if self._requested == self._sent and self._last_count() is False:
                # What the sender thread would do with it, done here: waking that thread only
                # to count a skip cost the writer a thread switch and a turn of the GIL on the
                # path of every commit (on a server, between the commit and its answer).
                self._requested += 1
                self._sent += 1
                self.skipped += 1
                return
            if keys is None or self._pending is None:
                self._pending = None
            else:
                self._pending |= keys
            self._requested += 1
            if self._sender is None:
                self._sender = threading.Thread(
                    target=self._send_loop, name="lakeshore-pg-notify", daemon=True
                )
                self._sender.start()
            self._cond.notify_all()

    def flush(self, timeout: float = FLUSH_S) -> bool:
        """Wait until every send() so far went out as a NOTIFY (or was given up on)."""
        with self._cond:
            target = self._requested
            return self._cond.wait_for(lambda: self._sent >= target, timeout)

    def _send_loop(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        backoff = BACKOFF_FIRST_S
        last = -NOTIFY_GAP_S
        while True:
            outcome = ""  # counted below, under the lock: send() counts skips too
            with self._cond:
                self._cond.wait_for(lambda: self._requested > self._sent or self._closed.is_set())
                if self._requested == self._sent:
                    break  # closed with nothing left to send
                gap = last + NOTIFY_GAP_S - time.monotonic()
                if gap > 0:  # a burst: let it gather, then one NOTIFY covers it
                    self._cond.wait_for(self._closed.is_set, gap)
                target = self._requested
                keys, self._pending = self._pending, frozenset()
            payload = encode_wake(self._token, keys)
            try:
                if conn is None:
                    conn = self._connect("notify", "-c synchronous_commit=off")
                if self._others_listen(conn):
                    conn.execute(*engine("notify", channel=self._channel, payload=payload))
                    outcome = "notified"
                else:
                    outcome = "skipped"
                last = time.monotonic()
                backoff = BACKOFF_FIRST_S
            except psycopg.Error as exc:
                log.warning(
                    "NOTIFY on %s failed (%s); waiters fall back to polling", self._channel, exc
                )
                close_quietly(conn)
                conn = None
                if self._closed.wait(backoff):
                    target = self._requested  # closing: give up on what is pending
                backoff = min(backoff * 2, BACKOFF_MAX_S)
            with self._cond:
                if outcome == "notified":
                    self.notified += 1
                elif outcome == "skipped":
                    self.skipped += 1
                self._sent = max(self._sent, target)
                self._cond.notify_all()
        close_quietly(conn)

    def _last_count(self) -> bool | None:
        """Whether others listened when last counted, or None once that count is
        LISTENERS_CHECK_S old."""
        counted_at, others = self._others
        return others if time.monotonic() - counted_at < LISTENERS_CHECK_S else None

    def _others_listen(self, conn: psycopg.Connection[Any]) -> bool:
        """Whether another process listens on this plane (counted at most LISTENERS_CHECK_S
        ago); True when the count cannot be had: a NOTIFY too many costs a re-check."""
        known = self._last_count()
        if known is not None:
            return known
        now = time.monotonic()
        try:
            row = conn.execute(
                *engine("other_listeners", app=self._listen_name, own=self._listen_pid)
            ).fetchone()
        except psycopg.Error:
            return True
        others = bool(row and row[0])
        self._others = (now, others)
        return others

    # -- the waiter side -------------------------------------------------------------------

    def listen(self, waker: Waker) -> None:
        """Start receiving wake-ups for this process (once, on its first wait)."""
        if self._listener is None and not self._closed.is_set():
            self._start_listener(waker)

    def _start_listener(self, waker: Waker) -> None:
        with self._cond:
            if self._listener is None:
                self._listener = threading.Thread(
                    target=self._listen_loop,
                    args=(waker,),
                    name="lakeshore-pg-listen",
                    daemon=True,
                )
                self._listener.start()

    def _listen_loop(self, waker: Waker) -> None:
        backoff = BACKOFF_FIRST_S
        while not self._closed.is_set():
            try:
                with self._connect("listen") as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
                    self._listen_pid = conn.info.backend_pid
                    # Every listening process counts this one from now (`_others_listen`).
                    hello = encode_wake(self._token, frozenset({HELLO}))
                    conn.execute(*engine("notify", channel=self._channel, payload=hello))
                    backoff = BACKOFF_FIRST_S
                    waker.notify(local_only=True)  # re-check what arrived while nobody listened
                    self.listening.set()
                    self._pump(conn, waker)
            except (psycopg.Error, OSError) as exc:
                if not self._closed.is_set():
                    log.warning("LISTEN %s lost (%s); reconnecting", self._channel, exc)
            finally:
                self.listening.clear()
                self._listen_pid = 0
            if self._closed.wait(backoff):
                break
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    def _pump(self, conn: psycopg.Connection[Any], waker: Waker) -> None:
        """Wait on the connection's socket and the close pipe; a readable socket is notifies."""
        while True:
            readable, _, _ = select.select(
                [conn.pgconn.socket, self._wake_r.fileno()], [], [], LISTEN_HEALTH_S
            )
            if self._closed.is_set():
                return
            if not readable:
                conn.execute("SELECT 1")  # a silent connection: prove it is alive
            keys: frozenset[str] | None = frozenset()
            woken = False
            for n in conn.notifies(timeout=0):
                token, theirs = decode_wake(n.payload)
                if token == self._token:
                    continue  # our own echo: this process woke its waiters already
                if theirs is not None and HELLO in theirs:
                    self._others = (time.monotonic(), True)  # a listener came: tell it too
                    continue
                woken = True
                keys = None if theirs is None or keys is None else keys | theirs
            if woken:
                # `keys` already holds READERS where readers should wake (Waker.notify added it).
                waker.notify(local_only=True, work=keys, reads=False)

    def _connect(self, role: str, options: str = "") -> psycopg.Connection[Any]:
        return psycopg.connect(
            for_role(self._conninfo, role, self.schema, options), autocommit=True
        )

    def close(self) -> None:
        if self._closed.is_set():
            return
        self.flush()
        self._closed.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"!")
        with self._cond:
            self._cond.notify_all()
        for thread in (self._sender, self._listener):
            if thread is not None and thread is not threading.current_thread():
                thread.join(FLUSH_S)
        self._wake_r.close()
        self._wake_w.close()
        _LIVE_RELAYS.discard(self)


#: A NOTIFY payload is at most 8000 bytes; a burst whose keys would not fit says "anything".
MAX_WAKE_PAYLOAD = 7000


def encode_wake(token: str, keys: frozenset[str] | None) -> str:
    """`token` alone (anything may have changed) or `token` and the keys, one per line."""
    if keys is None:
        return token
    payload = "\n".join([token, "", *sorted(keys)])
    return payload if len(payload) <= MAX_WAKE_PAYLOAD else token


def decode_wake(payload: str) -> tuple[str, frozenset[str] | None]:
    """(sender token, keys or None): a payload from an older sender (a bare token) is None."""
    token, sep, rest = payload.partition("\n")
    if not sep:
        return token, None
    return token, frozenset(k for k in rest.split("\n") if k)


_LIVE_RELAYS: weakref.WeakSet[NotifyRelay] = weakref.WeakSet()
_exit_hook = threading.Lock()
_exit_registered = False


def _register_exit_flush() -> None:
    """A script that submits and exits without close() still sends its last NOTIFY."""
    global _exit_registered
    with _exit_hook:
        if not _exit_registered:
            atexit.register(_flush_all)
            _exit_registered = True


def _flush_all() -> None:
    for relay in list(_LIVE_RELAYS):
        relay.flush()
