"""Keep-alive HTTP/1.1 on a plain socket: the SDK's path for plain-http control planes.

Why not httpx for every request: on a slow core httpx spends ~0.35-0.5 ms of CPU per request
(its URL model, the pure-Python h11 parser, the request/response objects), and an RPC over
loopback is a few such requests, so it was most of a call's cost. `http.client` does the same
exchange in about a third of that, but still parses every response's headers with the `email`
package (profiled: a quarter of a daemon's CPU per job went to its acks' responses). The control
plane answers with a status line, a handful of headers and a Content-Length body; this module
writes a request in one send and reads such an answer with a few slices (chunked bodies too, for
a proxy's sake). https is the same exchange over an `ssl.SSLContext`-wrapped socket (tls.py says
which certificates it trusts): TLS costs a handshake per connection, not per request, so a TLS
control plane keeps the lean path. `HttpDispatch` keeps httpx for everything this module does
not do: proxies from the environment, and transports that tests inject.

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
import ssl
import threading
import time
import urllib.request
import weakref
from typing import Any
from urllib.parse import urlencode, urlsplit

# What may be sent again after a reused connection failed before any answer arrived.
from .routes import IDEMPOTENT


def usable(url: str) -> bool:
    """http or https with no proxy in the environment for this host: this module can carry it."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    proxies = urllib.request.getproxies()
    if parts.scheme in proxies or "all" in proxies:
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
#: How a reused connection that the server closed under a request fails.
_STALE = (
    http.client.RemoteDisconnected,
    ConnectionResetError,
    BrokenPipeError,
    ConnectionAbortedError,
    ssl.SSLEOFError,  # the same, on a TLS connection closed without a close_notify
)


class Connections:
    """Per-thread keep-alive connections to one server; `request` is safe from any thread."""

    def __init__(
        self, url: str, headers: dict[str, str], tls: ssl.SSLContext | None = None
    ) -> None:
        """`tls`: how an https URL's server is verified (tls.tls_context); unused for http."""
        parts = urlsplit(url)
        assert parts.hostname is not None
        self.host = parts.hostname
        https = parts.scheme == "https"
        self.port = parts.port or (443 if https else 80)
        self.tls = (tls or ssl.create_default_context()) if https else None
        self.base_path = parts.path.rstrip("/")
        self.headers = headers
        self._local = threading.local()
        # Weak: a thread that ends takes its connection with it (see _Connection), so a program
        # that makes a thread per task leaks no sockets; close() still reaches the live ones.
        self._all: weakref.WeakSet[_Connection] = weakref.WeakSet()
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
            status, fields, data = conn.exchange(
                method,
                self.base_path + target,
                body,
                {**self.headers, **headers} if headers else self.headers,
            )
        except BaseException:
            self._drop(conn)
            raise
        conn.used_at = time.monotonic()
        if fields.get("connection", "").lower() == "close":
            self._drop(conn)
        return status, fields.get("content-type", ""), data

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
            conn = _Connection(self.host, self.port, timeout, self.tls)
            self._local.conn = conn
            with self._lock:
                self._all.add(conn)
        assert conn.sock is not None
        conn.sock.settimeout(timeout)
        return conn, reused

    def _drop(self, conn: _Connection) -> None:
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


class _Connection:
    """One keep-alive socket; closes it when collected (when the thread that held it ended)."""

    used_at = 0.0  # monotonic time of its last answer

    def __init__(
        self, host: str, port: int, timeout: float, tls: ssl.SSLContext | None = None
    ) -> None:
        self.host_header = f"{host}:{port}"
        self._buffer = bytearray()
        self.sock: socket.socket | None = None  # set before connecting: __del__ may see a failure
        sock = socket.create_connection((host, port), timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            try:  # the handshake runs here, under the same timeout as the connect
                sock = tls.wrap_socket(sock, server_hostname=host)
            except BaseException:
                sock.close()
                raise
        self.sock = sock

    def exchange(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        """Send one request; (status, lower-cased header fields, body) of its answer."""
        sock = self.sock
        if sock is None:
            raise http.client.NotConnected("connection closed")
        head = [f"{method} {path} HTTP/1.1\r\nHost: {self.host_header}\r\n"]
        head += [f"{name}: {value}\r\n" for name, value in headers.items()]
        if body is not None or method in _BODY_METHODS:
            head.append(f"Content-Length: {len(body) if body else 0}\r\n")
        head.append("\r\n")
        message = "".join(head).encode("latin-1")
        sock.sendall(message + body if body else message)
        status, fields = self._read_head()
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return status, fields, b""
        if fields.get("transfer-encoding", "").lower() == "chunked":
            return status, fields, self._read_chunked()
        length = fields.get("content-length")
        if length is None:  # delimited by the close (HTTP/1.0 style)
            fields["connection"] = "close"
            return status, fields, self._read_to_close()
        try:
            size = int(length)
        except ValueError:
            raise http.client.HTTPException(f"bad Content-Length {length!r}") from None
        return status, fields, self._read_exactly(size)

    def _read_head(self) -> tuple[int, dict[str, str]]:
        buffer = self._buffer
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(buffer) > _MAX_HEAD:
                raise http.client.HTTPException("response headers too long")
            if not self._fill():
                if buffer:
                    raise http.client.IncompleteRead(bytes(buffer))
                raise http.client.RemoteDisconnected("the server closed the connection")
        lines = bytes(buffer[:end]).decode("latin-1").split("\r\n")
        del buffer[: end + 4]
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/") or not code.isdigit():
            raise http.client.BadStatusLine(lines[0])
        fields: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        if version == "HTTP/1.0" and fields.get("connection", "").lower() != "keep-alive":
            fields["connection"] = "close"
        return int(code), fields

    def _read_exactly(self, size: int) -> bytes:
        buffer = self._buffer
        while len(buffer) < size:
            if not self._fill(size - len(buffer)):
                raise http.client.IncompleteRead(bytes(buffer), size - len(buffer))
        data = bytes(buffer[:size])
        del buffer[:size]
        return data

    def _read_line(self) -> bytes:
        buffer = self._buffer
        while (end := buffer.find(b"\r\n")) < 0:
            if not self._fill():
                raise http.client.IncompleteRead(bytes(buffer))
        line = bytes(buffer[:end])
        del buffer[: end + 2]
        return line

    def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            line = self._read_line().split(b";", 1)[0].strip()
            try:
                size = int(line, 16)
            except ValueError:
                raise http.client.HTTPException(f"bad chunk size {line!r}") from None
            if size == 0:
                while self._read_line():  # trailers, up to the empty line
                    pass
                return b"".join(parts)
            parts.append(self._read_exactly(size))
            self._read_exactly(2)  # the CRLF after each chunk

    def _read_to_close(self) -> bytes:
        while self._fill():
            pass
        data = bytes(self._buffer)
        self._buffer.clear()
        return data

    def _fill(self, want: int = 0) -> bool:
        """Read what the socket has into the buffer; False at the end of the stream."""
        assert self.sock is not None
        chunk = self.sock.recv(max(want, _RECV))
        self._buffer += chunk
        return bool(chunk)

    def close(self) -> None:
        sock, self.sock = self.sock, None
        self._buffer.clear()
        if sock is not None:
            sock.close()

    def __del__(self) -> None:
        self.close()


#: Methods whose requests carry a Content-Length even when empty (as http.client writes them).
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
#: How much one recv asks for, and the most a response's head may take.
_RECV = 256 * 1024
_MAX_HEAD = 64 * 1024


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
