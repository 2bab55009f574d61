"""A client that stalls while the server waits for it is cut off; a request the server holds is not
(issue 20, item 10: connections that sent nothing, half a request line or a short body were held
forever).

One server with both client timeouts at 1 s. Deadlines in the tests are several times that, so a
busy machine does not fail them; the lower bounds show it was the timeout that closed.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator

import httpx
import msgpack
import pytest

from tests.support.client import Api
from tests.support.raw_http import closed_within, connect, head, parse, read_answer, until_closed
from tests.support.server import StartedServer, server_process

pytestmark = pytest.mark.slow

TIMEOUT_S = 1.0
#: How long a test waits for the server to act on a 1 s timeout.
WITHIN_S = 8.0
NS = "/v1/namespaces/default"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartedServer]:
    args = ("--header-timeout-s", str(TIMEOUT_S), "--body-timeout-s", str(TIMEOUT_S))
    with server_process(tmp_path_factory.mktemp("timeouts"), extra_args=args) as s:
        yield s


@pytest.fixture
def api(srv: StartedServer) -> Iterator[Api]:
    client = Api(srv.url, srv.token)
    yield client
    client.close()


@pytest.fixture
def sock(srv: StartedServer) -> Iterator[socket.socket]:
    with connect(srv.url) as s:
        yield s


def submit_head(srv: StartedServer, queue: str, length: int) -> bytes:
    return head(
        "POST",
        f"{NS}/queues/{queue}/invocations",
        {
            "authorization": f"Bearer {srv.token}",
            "content-type": "application/json",
            "accept": "application/json",
            "content-length": str(length),
        },
    )


def test_a_connection_that_sends_nothing_is_closed_without_an_answer(sock: socket.socket) -> None:
    closed = until_closed(sock, WITHIN_S)

    assert closed.data == b""  # nothing was asked, so nothing is answered
    assert closed.after_s >= TIMEOUT_S / 2


@pytest.mark.parametrize("partial", [b"GET /v1/hel", b"GET /\r\n", b"GET /v1/hello HTTP/1.1\r\n"])
def test_a_partial_request_is_answered_408_and_closed(sock: socket.socket, partial: bytes) -> None:
    """Half a request line, an HTTP/0.9 line, a request line with no headers after it."""
    sock.sendall(partial)

    closed = until_closed(sock, WITHIN_S)

    answer = parse(closed.data)
    assert answer.status == 408
    assert answer.headers["connection"] == "close"
    error = answer.error()
    assert error["code"] == "request_timeout"
    assert "--header-timeout-s" in str(error["message"])


def test_slowloris_is_closed_although_it_keeps_sending(sock: socket.socket) -> None:
    """A header byte every 0.2 s: bytes that keep coming do not extend the headers' deadline."""
    trickle = iter(b"GET /v1/hello HTTP/1.1\r\nx-slow: " + b"a" * 1000)
    sent = 0
    while not closed_within(sock, 0.2):  # the attack's pace, and a watch for the server's close
        sock.sendall(bytes([next(trickle)]))
        sent += 1
        assert sent < WITHIN_S / 0.2, "the server let a trickling request line run on"

    assert parse(until_closed(sock, WITHIN_S).data).status == 408
    assert sent >= 3  # it was sending all along


def test_an_endless_header_is_refused_431_before_the_timeout(sock: socket.socket) -> None:
    """Sent fast, a header that never ends would fill memory for the whole timeout."""
    sock.sendall(b"GET /v1/hello HTTP/1.1\r\nx-endless: ")
    with contextlib.suppress(OSError):  # the server closes while this is still sending
        sock.sendall(b"a" * 80 * 1024)

    answer = parse(until_closed(sock, WITHIN_S).data)

    assert answer.status == 431
    assert answer.error()["code"] == "headers_too_large"


def test_a_partial_next_request_on_a_kept_alive_connection_is_closed(
    srv: StartedServer, sock: socket.socket
) -> None:
    sock.sendall(head("GET", "/v1/hello", {"accept": "application/json"}))
    assert read_answer(sock).status == 200

    sock.sendall(b"GET /v1/hel")

    assert parse(until_closed(sock, WITHIN_S).data).status == 408


def test_a_body_shorter_than_its_length_is_answered_408_and_changes_nothing(
    srv: StartedServer, sock: socket.socket, api: Api
) -> None:
    body = json.dumps({"items": [{"json": 1}]}).encode()
    sock.sendall(submit_head(srv, "short-body", len(body) + 10) + body)

    closed = until_closed(sock, WITHIN_S)

    answer = parse(closed.data)
    assert answer.status == 408
    error = answer.error()
    assert error["code"] == "request_timeout"
    assert "--body-timeout-s" in str(error["message"])
    assert closed.after_s >= TIMEOUT_S / 2
    assert api.call("GET", f"{NS}/queues/short-body")[0] == 404


def test_an_answered_request_whose_discarded_body_stalls_is_closed(
    srv: StartedServer, sock: socket.socket
) -> None:
    """A body refused unread (413) is discarded as it comes; when it stops coming, that ends too."""
    sock.sendall(submit_head(srv, "huge", 10 * 2**30) + b"\x00" * 65536)

    closed = until_closed(sock, WITHIN_S)

    assert parse(closed.data).status == 413


def test_a_body_sent_slowly_but_steadily_is_read_whole(
    srv: StartedServer, sock: socket.socket, api: Api
) -> None:
    """The body's timeout is a stall timeout: three pauses of half of it add up past it."""
    body = json.dumps({"items": [{"json": "slow but steady"}]}).encode()
    sock.sendall(submit_head(srv, "steady", len(body)))
    for i in range(3):
        assert not closed_within(sock, TIMEOUT_S / 2), "closed while the client was sending"
        sock.sendall(body[i * len(body) // 3 : (i + 1) * len(body) // 3])

    assert read_answer(sock).status == 201
    assert api.call("GET", f"{NS}/queues/steady/count", params={"state": "queued"})[1] == {
        "count": 1
    }


def test_long_polls_the_server_holds_outlast_the_client_timeouts(
    srv: StartedServer, api: Api
) -> None:
    """The server's waits are not the client's stalls: each is held three times the timeouts."""
    status, body = api.call("POST", f"{NS}/queues/polled/invocations", {"items": [{"json": 1}]})
    assert status == 201
    (inv,) = body["ids"]
    wait = 3 * TIMEOUT_S

    with httpx.Client(base_url=srv.url, timeout=30) as client:
        auth = {"authorization": f"Bearer {srv.token}", "accept": "application/msgpack"}
        held = client.get(f"{NS}/invocations/{inv}", params={"wait": wait}, headers=auth)
        assert held.status_code == 200
        assert held.elapsed.total_seconds() >= wait * 0.9  # held the whole wait: still queued
        assert msgpack.unpackb(held.content)["state"] == "queued"

        claim = {"queues": ["empty-queue"], "worker": "w", "wait": wait}
        held = client.post(
            f"{NS}/claims",
            content=msgpack.packb(claim),
            headers={**auth, "content-type": "application/msgpack"},
        )
        assert held.status_code == 200
        assert held.elapsed.total_seconds() >= wait * 0.9
        assert msgpack.unpackb(held.content)["claim"] is None

        assert client.get("/v1/hello", headers=auth).status_code == 200
