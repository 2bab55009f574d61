"""Keep-alive HTTP/1.1 over the standard library: the SDK's path for plain-http control planes.

Why not httpx for every request: on a slow core httpx spends ~0.35-0.5 ms of CPU per request
(its URL model, the pure-Python h11 parser, the request/response objects), and an RPC over
loopback is a few such requests, so it was most of a call's cost. `http.client` does the same
HTTP/1.1 exchange in about a third of that. `HttpDispatch` keeps httpx for everything this
module does not do: TLS, proxies from the environment, and transports that tests inject.

One connection per thread, as httpx's pool would hand out: the daemon's claim, heartbeat and
ack threads each hold theirs, and a long-poll on one never queues another's request. A pooled
connection the server has closed meanwhile (uvicorn drops idle ones after a few seconds) is
noticed before it is used, as httpcore does, so a request is never written into a dead socket.
That check can still lose a race with a server closing at that very moment, so a connection is
not reused at all once it has been idle for `MAX_IDLE_S` (well under uvicorn's 5 s), and an
idempotent request (GET, HEAD, PUT, DELETE) that fails on a reused connection before any byte of
an answer is sent once more on a fresh one. Any other failure is raised: the caller decides
what is safe to repeat.
"""

from __future__ import annotations

import http.client
import select
import socket
import threading
import time
import urllib.request
import weakref
from typing import Any
from urllib.parse import urlencode, urlsplit


def usable(url: str) -> bool:
    """Plain http with no proxy in the environment for this host: this module can carry it."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        return False
    proxies = urllib.request.getproxies()
    if "http" in proxies or "all" in proxies:
        return bool(urllib.request.proxy_bypass(parts.hostname))
    return True


def query_string(params: dict[str, Any] | None) -> str:
    """`?a=1&b=true` as httpx would write it: None dropped, booleans lower-case."""
    if not params:
        return ""
    pairs = [
        (k, ("true" if v else "false") if isinstance(v, bool) else v)
        for k, v in params.items()
        if v is not None
    ]
    return "?" + urlencode(pairs) if pairs else ""


#: A keep-alive connection idle for longer than this is replaced rather than reused: servers
#: close idle ones (uvicorn after 5 s), and a request racing that close fails.
MAX_IDLE_S = 2.0
#: What may be sent again after a reused connection failed before any answer arrived.
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
#: How a reused connection that the server closed under a request fails.
_STALE = (
    http.client.RemoteDisconnected,
    ConnectionResetError,
    BrokenPipeError,
    ConnectionAbortedError,
)


class Connections:
    """Per-thread keep-alive connections to one server; `request` is safe from any thread."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        parts = urlsplit(url)
        assert parts.hostname is not None
        self.host = parts.hostname
        self.port = parts.port or 80
        self.base_path = parts.path.rstrip("/")
        self.headers = headers
        self._local = threading.local()
        # Weak: a thread that ends takes its connection with it (see _Connection), so a program
        # that makes a thread per task leaks no sockets; close() still reaches the live ones.
        self._all: weakref.WeakSet[http.client.HTTPConnection] = weakref.WeakSet()
        self._lock = threading.Lock()

    def request(
        self,
        method: str,
        target: str,
        body: bytes | None,
        headers: dict[str, str] | None,
        timeout: float,
    ) -> tuple[int, str, bytes]:
        """(status, content type, body). Raises OSError or http.client.HTTPException."""
        conn, reused = self._connection(timeout)
        try:
            return self._exchange(conn, method, target, body, headers)
        except _STALE:
            if not (reused and method in IDEMPOTENT):
                raise
        conn, _ = self._connection(timeout)  # the stale one was dropped: this one is fresh
        return self._exchange(conn, method, target, body, headers)

    def _exchange(
        self,
        conn: _Connection,
        method: str,
        target: str,
        body: bytes | None,
        headers: dict[str, str] | None,
    ) -> tuple[int, str, bytes]:
        try:
            conn.request(
                method,
                self.base_path + target,
                body=body,
                headers={**self.headers, **headers} if headers else self.headers,
            )
            response = conn.getresponse()
            data = response.read()
        except BaseException:
            self._drop(conn)
            raise
        conn.used_at = time.monotonic()
        if response.will_close:
            self._drop(conn)
        return response.status, response.getheader("content-type", ""), data

    def _connection(self, timeout: float) -> tuple[_Connection, bool]:
        """This thread's connection, and whether it is a reused one."""
        conn: _Connection | None = getattr(self._local, "conn", None)
        if conn is not None and (
            conn.sock is None
            or time.monotonic() - conn.used_at > MAX_IDLE_S
            or _closed_by_peer(conn.sock)
        ):
            self._drop(conn)
            conn = None
        reused = conn is not None
        if conn is None:
            conn = _Connection(self.host, self.port, timeout=timeout)
            conn.connect()
            assert conn.sock is not None
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._local.conn = conn
            with self._lock:
                self._all.add(conn)
        assert conn.sock is not None
        conn.sock.settimeout(timeout)
        return conn, reused

    def _drop(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None
        with self._lock:
            self._all.discard(conn)

    def close(self) -> None:
        with self._lock:
            conns = list(self._all)
            self._all.clear()
        for conn in conns:
            conn.close()


class _Connection(http.client.HTTPConnection):
    """Closes its socket when it is collected: when the thread that held it has ended."""

    used_at = 0.0  # monotonic time of its last answer

    def __del__(self) -> None:
        self.close()


def _closed_by_peer(sock: socket.socket) -> bool:
    """An idle keep-alive socket that reads as ready has been closed (or broken) by the server:
    between requests it has nothing else to say."""
    try:
        if hasattr(select, "poll"):  # no FD_SETSIZE limit, unlike select()
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            return bool(poller.poll(0))
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)
