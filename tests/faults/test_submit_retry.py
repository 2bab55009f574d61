"""A submit whose answer is lost is sent again, and makes one job, not two.

A proxy in front of a real `lakeshore server` passes every request through but eats the answer
to the first submits: the server has committed the jobs, the client sees its connection close
with no answer. The SDK minted the jobs' ids, so it sends the same submit again and the plane
answers with the jobs it made. Before client ids, the caller got an error for a job that
existed (and a retry of its own made a second one).

While a submit is sent again it says so: `lakeshore submit` against a plane that is down used to
be silent for the whole 30 s window before its error (issue 33, item 7b).
"""

from __future__ import annotations

import queue
import random
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from procs import ServerProcess
from proxy import ChaosProxy

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane import HttpDispatch
from tests.support.server import LAUNCH, free_port, server_env

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


def lines_of(stream: object) -> queue.Queue[str]:
    """The lines a subprocess writes to `stream`, as it writes them ("" once it closes)."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stream:  # type: ignore[attr-defined]
            lines.put(line)
        lines.put("")

    threading.Thread(target=read, daemon=True).start()
    return lines


def cli_submit(url: str, token: str, home: Path) -> subprocess.Popen[str]:
    """`lakeshore submit late --payload hi --url URL` as a process of its own."""
    env = {**server_env(home), "LAKESHORE_TOKEN": token}
    return subprocess.Popen(
        [sys.executable, "-c", LAUNCH, "submit", "late", "--payload", "hi", "--url", url],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_cli_submit_to_a_closed_port_says_at_once_what_it_retries(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with cli_submit(url, "lks_nobody", tmp_path) as proc:
        try:
            # Its 30 s window used to pass in silence, the first line being the error at its
            # end; now the first retry says what it retries and for how long, in the window.
            line = lines_of(proc.stderr).get(timeout=60)
            assert line.startswith(
                f"cannot reach the control plane at {url}: Connection refused; retrying for "
            ), line
            assert "s more (submit is sent again with the ids minted here" in line, line
            assert proc.poll() is None  # still inside its window
        finally:
            proc.kill()


def test_a_cli_submit_while_the_plane_is_unreachable_lands_once_it_answers(
    tmp_path: Path, rng: random.Random
) -> None:
    with ServerProcess(tmp_path / "server") as server, ChaosProxy(server.port, rng) as proxy:
        # Given a plane that resets every connection (as one restarting behind a balancer)
        proxy.set(drop_p=1.0)
        with cli_submit(proxy.url, server.token, tmp_path / "client") as proc:
            try:
                # When `lakeshore submit` meets it, it says it is retrying, inside its window
                line = lines_of(proc.stderr).get(timeout=60)
                assert line.startswith(f"cannot reach the control plane at {proxy.url}"), line
                assert "retrying for" in line, line
                assert proc.poll() is None

                # Then once the plane answers, the job lands, once
                proxy.set()
                assert proc.wait(timeout=60) == 0
                assert proc.stdout is not None
                inv_id = proc.stdout.read().strip()
            finally:
                proc.kill()
        with HttpDispatch(server.url, token=server.token) as plane:
            assert [row.id for row in plane.invocations(queue="late")] == [inv_id]
