"""One open channel from a daemon to its server (issue 48): a WebSocket at `/v1/channel` over
which the server speaks first, and which can carry the daemon's requests as well.

The server's pushes come tagged 0: `[0, "renew"]` when a kill was asked for a job this
daemon holds, so that it renews (and so learns the kill) now, not at its next lease renewal.
A request on the channel is the HTTP request it stands for (method, path and query, msgpack
body) tagged with a number; the server runs it through its own app and answers with that
number (server/channel.py), so every verb keeps its route, its checks and its fencing.

Which the daemon uses is `--channel`: `push` (the default) keeps the channel for the server's
word and sends requests over keep-alive HTTP, which measured cheaper per round trip on this
stack (`make bench`, suite channel: uvicorn's WebSocket framing and the client's reader
thread cost more than an HTTP/1.1 request on httptools); `requests` sends them over the
channel too.

No new failure mode: the channel is opened, and after a drop reopened with a backoff, by a
thread of its own; while it is not open, requests go over HTTP. One the server or a proxy
refuses outright (an HTTP status where the upgrade should be) is not tried again, and that is
said once. A request whose channel dropped after it was sent is answered as a dropped HTTP
connection is (the transport raises Unavailable, its caller's retries decide). Pushes are
hints: a daemon that never gets one still learns everything at its next renewal.

Only the daemon opens a channel: a producer imports none of this, nor the websockets library.
"""

from __future__ import annotations

import itertools
import random
import ssl
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgpack

from dreamlake.lakeshore.logs import EventLog

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection

log = EventLog("dreamlake.lakeshore.channel")

PATH = "/v1/channel"
#: Bodies above this go over HTTP: the server takes WebSocket messages of up to 16 MiB
#: (uvicorn's default), and a large body would hold the channel up for every other request.
MAX_BODY = 4 << 20
#: Backoff between tries to open a channel that could not be opened (or dropped), doubled up
#: to the last; jittered so that a fleet that lost its server does not come back together.
BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)
OPEN_TIMEOUT_S = 5.0
#: The id of a push (requests count from 1).
PUSH = 0

Push = Callable[[str, Any], None]


class ChannelDown(Exception):
    """No channel to send on now: send over HTTP (nothing was sent)."""


class ChannelLost(Exception):
    """The channel dropped after the request was sent: it may or may not have been done."""


class _Pending:
    __slots__ = ("answer", "done")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.answer: tuple[int, str, bytes] | None = None


class Channel:
    """A daemon's channel to one replica, kept open by a thread of its own from `start` on
    (reopened after a drop, with a backoff), until `close`."""

    def __init__(self, url: str, headers: dict[str, str], tls: ssl.SSLContext | None) -> None:
        scheme = "wss" if url.startswith("https:") else "ws"
        self.url = scheme + url[url.index(":") :] + PATH
        self._headers = {k: v for k, v in headers.items() if k != "accept"}
        self._tls = tls
        self._lock = threading.Lock()  # the connection's state and its sends
        self._conn: ClientConnection | None = None
        self._pending: dict[int, _Pending] = {}
        self._ids = itertools.count(1)
        self._failures = 0
        #: Why the server (or a proxy before it) refused the upgrade; then no channel, ever.
        self.refused: str | None = None
        self._hello: tuple[str, str] | None = None
        self._push: Push | None = None
        self._closed = threading.Event()
        self._dropped_event = threading.Event()
        self._keeper: threading.Thread | None = None

    @property
    def open(self) -> bool:
        return self._conn is not None

    def start(self, namespace: str, worker: str, push: Push) -> None:
        """Open the channel for `worker` and keep it open: the server pushes it what concerns
        that worker, to `push(kind, detail)` on the channel's reader thread (it must not
        block). Said again on every reopening."""
        with self._lock:
            self._hello, self._push = (namespace, worker), push
            conn, keeper = self._conn, self._keeper
            if keeper is None:
                self._keeper = threading.Thread(
                    target=self._keep, name="lakeshore-channel-keeper", daemon=True
                )
                self._keeper.start()
        if conn is not None:
            self._send_hello(conn)

    def request(
        self, method: str, target: str, content: bytes | None, timeout: float
    ) -> tuple[int, str, bytes]:
        """(status, content type, body) of one request; ChannelDown when none was sent."""
        if content is not None and len(content) > MAX_BODY:
            raise ChannelDown("body too large for the channel")
        n = next(self._ids)
        pending = _Pending()
        with self._lock:
            conn = self._conn
            if conn is None:
                raise ChannelDown(self.refused or "no channel open now")
            self._pending[n] = pending
        try:
            try:
                with self._lock:
                    conn.send(msgpack.packb([n, method, target, content]))
            except Exception as exc:
                self._dropped(conn, exc)
                raise ChannelLost(f"the channel dropped: {exc}") from exc
            if not pending.done.wait(timeout):
                raise ChannelLost(f"no answer on the channel within {timeout:g} s")
            if pending.answer is None:
                raise ChannelLost("the channel dropped before the answer came")
            return pending.answer
        finally:
            with self._lock:
                self._pending.pop(n, None)

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            conn = self._conn
        if conn is not None:
            conn.close()
        self._dropped_event.set()

    # -- the connection ------------------------------------------------------------------------

    def _keep(self) -> None:
        """Open the channel, and again after each drop (backed off), until closed or refused."""
        while not self._closed.is_set():
            try:
                conn = self._open()
            except ChannelDown:
                if self.refused is not None:
                    return
                self._closed.wait(self._backoff())
                continue
            self._dropped_event.clear()
            with self._lock:
                self._conn, self._failures = conn, 0
            log.info("channel.opened", url=self.url)
            threading.Thread(
                target=self._read, args=(conn,), name="lakeshore-channel", daemon=True
            ).start()
            self._send_hello(conn)
            self._dropped_event.wait()
            if not self._closed.is_set():
                self._closed.wait(self._backoff())

    def _open(self) -> ClientConnection:
        try:
            from websockets.exceptions import InvalidStatus
            from websockets.sync.client import connect
        except ImportError as exc:  # a daemon installed without its extra
            with self._lock:
                self.refused = f"the websockets library is not installed ({exc})"
            log.warning("channel.refused", url=self.url, why=self.refused,
                        effect="every request goes over HTTP; pip install "
                        "'dreamlake-lakeshore[daemon]'")  # fmt: skip
            raise ChannelDown(self.refused) from exc

        try:
            return connect(
                self.url,
                additional_headers=self._headers,
                ssl=self._tls if self.url.startswith("wss:") else None,
                compression=None,  # msgpack of ids and payloads: deflate costs more than it saves
                open_timeout=OPEN_TIMEOUT_S,
                max_size=None,  # the server's answers: a claim carries its payload whole
                proxy=None,
                user_agent_header="lakeshore-daemon",
            )
        except InvalidStatus as exc:
            status = exc.response.status_code
            with self._lock:
                self.refused = f"the server answered the upgrade with HTTP {status}"
            log.warning(
                "channel.refused",
                url=self.url,
                why=self.refused,
                effect="every request goes over HTTP (a proxy that does not carry WebSockets, "
                "or a server before issue 48)",
            )
            raise ChannelDown(self.refused) from exc
        except Exception as exc:
            raise ChannelDown(f"cannot open the channel: {exc}") from exc

    def _backoff(self) -> float:
        """How long to wait before the next try (longer after each failed one)."""
        with self._lock:
            step = BACKOFF_S[min(self._failures, len(BACKOFF_S) - 1)]
            self._failures += 1
        return step * random.uniform(1.0, 1.5)

    def _send_hello(self, conn: ClientConnection) -> None:
        with self._lock:
            hello = self._hello
        if hello is None:
            return
        try:
            with self._lock:
                conn.send(msgpack.packb([PUSH, "hello", hello[0], hello[1]]))
        except Exception as exc:
            self._dropped(conn, exc)

    def _read(self, conn: ClientConnection) -> None:
        """Answers to their requests, pushes to the daemon, until the connection ends."""
        error: BaseException | None = None
        try:
            for raw in conn:
                if isinstance(raw, str):
                    continue
                message = msgpack.unpackb(raw)
                if message[0] == PUSH:
                    push = self._push
                    if push is not None:
                        push(str(message[1]), message[2] if len(message) > 2 else None)
                    continue
                with self._lock:
                    pending = self._pending.get(message[0])
                if pending is not None:
                    pending.answer = (int(message[1]), str(message[2]), bytes(message[3]))
                    pending.done.set()
        except Exception as exc:  # a dropped connection, or a message that is not ours
            error = exc
        self._dropped(conn, error)

    def _dropped(self, conn: ClientConnection, error: BaseException | None) -> None:
        with self._lock:
            if self._conn is not conn:
                return
            self._conn = None
            waiting = list(self._pending.values())
            closed = self._closed.is_set()
        for pending in waiting:
            pending.done.set()  # no answer: ChannelLost
        if not closed:
            log.info("channel.dropped", url=self.url, error=str(error or "closed"))
        conn.close()
        self._dropped_event.set()
