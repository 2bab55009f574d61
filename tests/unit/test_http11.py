"""The SDK's lean HTTP/1.1 path: keep-alive reuse, and a connection the server closed."""

from __future__ import annotations

import gc
import http.server
import threading
from collections.abc import Iterator

import pytest

from dreamlake.lakeshore.plane import http11


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    #: The server hangs up after each answer without saying so (no `Connection: close`), as
    #: uvicorn does to a keep-alive connection that sat idle past its timeout.
    hang_up = False

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        self.server.peers.add(self.client_address)  # type: ignore[attr-defined]
        reply = b"echo:" + body + b":" + self.path.encode()
        self.send_response(200)
        self.send_header("content-type", "application/octet-stream")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)
        if self.hang_up:
            self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    def __init__(self, handler: type[_Handler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.peers: set[tuple[str, int]] = set()
        self.closed = threading.Semaphore(0)

    def shutdown_request(self, request: object) -> None:
        super().shutdown_request(request)  # type: ignore[arg-type]
        self.closed.release()


@pytest.fixture(params=[False, True], ids=["keep-alive", "server-hangs-up"])
def server(request: pytest.FixtureRequest) -> Iterator[_Server]:
    handler = type("H", (_Handler,), {"hang_up": request.param})
    srv = _Server(handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_requests_reuse_a_connection_until_the_server_closes_it(server: _Server) -> None:
    """A keep-alive connection the server closed while idle is replaced before it is used."""
    host, port = server.server_address[:2]
    hangs_up = server.RequestHandlerClass.hang_up  # type: ignore[attr-defined]
    conns = http11.Connections(f"http://{host}:{port}/base/", {"user-agent": "t"})
    answers = []
    try:
        for i in range(3):
            answers.append(conns.request("POST", f"/p{i}", b"x", None, 5.0))
            if hangs_up:
                assert server.closed.acquire(timeout=5)  # idle, and closed by the server
    finally:
        conns.close()

    assert [a[2] for a in answers] == [b"echo:x:/base/p0", b"echo:x:/base/p1", b"echo:x:/base/p2"]
    assert all(a[0] == 200 and a[1] == "application/octet-stream" for a in answers)
    assert len(server.peers) == (3 if hangs_up else 1)


def test_query_strings_are_written_as_httpx_writes_them() -> None:
    assert http11.query_string(None) == ""
    assert http11.query_string({"wait": 0.5, "force": True, "skip": None}) == "?wait=0.5&force=true"


def test_only_http_and_https_without_a_proxy_take_the_lean_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name in ("ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert http11.usable("http://127.0.0.1:8765")
    assert http11.usable("https://cp.example.com")  # TLS on the lean path too (tls.py)
    assert not http11.usable("ftp://cp.example.com")
    monkeypatch.setenv("https_proxy", "http://proxy:3128")
    assert not http11.usable("https://cp.example.com")
    monkeypatch.setenv("http_proxy", "http://proxy:3128")
    assert not http11.usable("http://cp.example.com:8765")
    monkeypatch.setenv("no_proxy", "cp.example.com")
    assert http11.usable("http://cp.example.com:8765")


def test_a_thread_that_ends_takes_its_connection_with_it(server: _Server) -> None:
    host, port = server.server_address[:2]
    conns = http11.Connections(f"http://{host}:{port}", {})
    try:
        workers = [
            threading.Thread(target=conns.request, args=("POST", "/", b"x", None, 5.0))
            for _ in range(5)
        ]
        for t in workers:
            t.start()
            t.join()
        gc.collect()
        assert len(conns._all) == 0  # nothing holds the dead threads' connections open
        conns.request("POST", "/", b"x", None, 5.0)
        assert len(conns._all) == 1
    finally:
        conns.close()
    assert len(conns._all) == 0


class _DropsSecond(_Handler):
    """Answers the first request of a connection; reads the second and hangs up unanswered: a
    server closing an idle keep-alive connection just as the client reused it."""

    def handle(self) -> None:
        self.served = 0
        super().handle()

    def handle_one_request(self) -> None:
        if self.served == 1:
            self.raw_requestline = self.rfile.readline(65537)
            self.close_connection = True
            return
        self.served += 1
        super().handle_one_request()

    def do_GET(self) -> None:
        self.headers["content-length"] = "0"
        self.do_POST()


@pytest.fixture
def dropping() -> Iterator[_Server]:
    srv = _Server(_DropsSecond)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_an_idempotent_request_on_a_connection_the_server_dropped_is_sent_once_more(
    dropping: _Server,
) -> None:
    host, port = dropping.server_address[:2]
    conns = http11.Connections(f"http://{host}:{port}", {})
    try:
        assert conns.request("GET", "/a", None, None, 5.0)[0] == 200
        status, _, body = conns.request("GET", "/b", None, None, 5.0)  # dropped, then resent
    finally:
        conns.close()

    assert (status, body) == (200, b"echo::/b")
    assert len(dropping.peers) == 2


def test_a_post_on_a_connection_the_server_dropped_is_not_repeated(dropping: _Server) -> None:
    host, port = dropping.server_address[:2]
    conns = http11.Connections(f"http://{host}:{port}", {})
    try:
        conns.request("POST", "/a", b"1", None, 5.0)
        with pytest.raises(http11.http.client.RemoteDisconnected):
            conns.request("POST", "/b", b"2", None, 5.0)  # the caller decides about a submit
        assert conns.request("POST", "/c", b"3", None, 5.0)[2] == b"echo:3:/c"
    finally:
        conns.close()


def test_a_connection_idle_past_the_limit_is_not_reused(
    server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http11, "MAX_IDLE_S", 0.0)
    host, port = server.server_address[:2]
    conns = http11.Connections(f"http://{host}:{port}", {})
    try:
        for i in range(3):
            assert conns.request("POST", f"/{i}", b"x", None, 5.0)[0] == 200
    finally:
        conns.close()

    assert len(server.peers) == 3


class _Framings(http.server.BaseHTTPRequestHandler):
    """Answers framed every way HTTP/1.1 allows (a proxy may re-frame the plane's answers)."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path == "/chunked":
            self.send_response(200)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nx-trailer: t\r\n\r\n")
        elif self.path == "/until-close":
            self.send_response(200)
            self.send_header("connection", "close")
            self.end_headers()
            self.wfile.write(b"read me to the end")
            self.close_connection = True
        elif self.path == "/no-content":
            self.send_response(204)
            self.end_headers()
        else:  # a status line that is not HTTP
            self.wfile.write(b"garbage\r\n\r\n")
            self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def framings() -> Iterator[http11.Connections]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Framings)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    host, port = srv.server_address[:2]
    conns = http11.Connections(f"http://{host}:{port}", {})
    yield conns
    conns.close()
    srv.shutdown()
    srv.server_close()


def test_every_framing_of_an_answer_is_read(framings: http11.Connections) -> None:
    assert framings.request("GET", "/chunked", None, None, 5.0)[::2] == (200, b"hello world")
    assert framings.request("GET", "/until-close", None, None, 5.0)[::2] == (
        200,
        b"read me to the end",
    )
    assert framings.request("GET", "/no-content", None, None, 5.0)[::2] == (204, b"")
    assert framings.request("GET", "/chunked", None, None, 5.0)[2] == b"hello world"


def test_an_answer_that_is_not_http_is_an_error(framings: http11.Connections) -> None:
    import http.client

    with pytest.raises(http.client.HTTPException):
        framings.request("GET", "/garbage", None, None, 5.0)
