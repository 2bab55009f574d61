"""HTTP by hand over a socket, for tests of what a client library would never send.

A partial request line, a body shorter than its Content-Length, an upload that stops half way:
the tests write exactly those bytes and read what the server does about them, with deadlines
(a socket timeout or a `select`), never a sleep.
"""

from __future__ import annotations

import json
import select
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit


def connect(url: str, timeout_s: float = 10.0) -> socket.socket:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return socket.create_connection((parts.hostname, parts.port), timeout=timeout_s)


def head(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "host: test", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@dataclass(frozen=True)
class Closed:
    """What the server sent before it closed the connection, and when it closed it."""

    data: bytes
    after_s: float


def until_closed(sock: socket.socket, within_s: float) -> Closed:
    """Read until the server closes; fails the test if it is still open after `within_s`."""
    start = time.monotonic()
    data = b""
    while True:
        left = within_s - (time.monotonic() - start)
        if left <= 0:
            raise AssertionError(f"still open after {within_s} s; received {data[:200]!r}")
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue  # the loop's deadline check fails the test
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            return Closed(data, time.monotonic() - start)
        data += chunk


def closed_within(sock: socket.socket, wait_s: float) -> bool:
    """Whether the server closes the connection (or answers) within `wait_s`; waits no longer."""
    readable, _, _ = select.select([sock], [], [], wait_s)
    return bool(readable)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def error(self) -> dict[str, object]:
        """The `{error: {code, message}}` of a JSON error answer."""
        err = json.loads(self.body)["error"]
        assert isinstance(err, dict)
        return err


def read_answer(sock: socket.socket, timeout_s: float = 30.0) -> Answer:
    """One response with a Content-Length (the server always sends one)."""
    sock.settimeout(timeout_s)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"closed before an answer; received {data[:200]!r}")
        data += chunk
    top, _, rest = data.partition(b"\r\n\r\n")
    status_line, *lines = top.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines)}
    size = int(headers.get("content-length", "0"))
    while len(rest) < size:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"closed inside an answer; received {data[:200]!r}")
        rest += chunk
    return Answer(int(status_line.split()[1]), headers, rest[:size])


def parse(data: bytes) -> Answer:
    """An answer already read whole (what came before a close)."""
    top, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = top.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines)}
    return Answer(int(status_line.split()[1]), headers, body)
