"""A submit whose answer is lost is sent again, and makes one job, not two.

A proxy in front of a real `lakeshore server` passes every request through but eats the answer
to the first submits: the server has committed the jobs, the client sees its connection close
with no answer. The SDK minted the jobs' ids, so it sends the same submit again and the plane
answers with the jobs it made. Before client ids, the caller got an error for a job that
existed (and a retry of its own made a second one).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from procs import ServerProcess

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane import HttpDispatch

pytestmark = pytest.mark.slow


class AnswerEater:
    """Passes HTTP/1.1 through to `upstream`, closing the client's connection instead of
    answering the first `eat` submits (requests to `.../invocations` by POST)."""

    def __init__(self, upstream: int, eat: int) -> None:
        self.upstream = upstream
        self.left = eat
        self.eaten = 0
        self._lock = threading.Lock()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client, socket.create_connection(("127.0.0.1", self.upstream)) as server:
            client_in, server_in = client.makefile("rb"), server.makefile("rb")
            while (request := _message(client_in)) is not None:
                server.sendall(request)
                answer = _message(server_in)
                if answer is None:
                    return
                head = request.split(b"\r\n", 1)[0]
                if head.startswith(b"POST ") and b"/invocations" in head and self._eat():
                    return  # the server committed; the client hears nothing
                client.sendall(answer)

    def _eat(self) -> bool:
        with self._lock:
            if self.left <= 0:
                return False
            self.left -= 1
            self.eaten += 1
            return True


def _message(stream: socket.SocketIO | object) -> bytes | None:
    """One HTTP/1.1 message with a Content-Length body (what the SDK and the server send)."""
    lines = []
    length = 0
    while True:
        line = stream.readline()  # type: ignore[attr-defined]
        if not line:
            return None
        lines.append(line)
        if line == b"\r\n":
            break
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    body = stream.read(length) if length else b""  # type: ignore[attr-defined]
    return b"".join(lines) + body


@pytest.fixture
def eaten(tmp_path: Path) -> Iterator[tuple[ServerProcess, AnswerEater]]:
    with ServerProcess(tmp_path / "server") as server:
        proxy = AnswerEater(server.port, eat=2)
        try:
            yield server, proxy
        finally:
            proxy.close()


def test_a_submit_whose_answer_was_lost_makes_one_job(
    eaten: tuple[ServerProcess, AnswerEater],
) -> None:
    server, proxy = eaten
    with HttpDispatch(proxy.url, token=server.token, timeout_s=10) as plane:
        q = dls.SyncQueue("lost", dispatch=plane)

        inv = q.submit({"n": 1})
        ids = q.submit_many([{"n": 2}, {"n": 3}])

        assert proxy.eaten == 2  # both submits lost their first answer
        assert q.count("queued") == 3
        assert {inv, *ids} == {row.id for row in plane.invocations(queue="lost")}
