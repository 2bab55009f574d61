"""How the SDK's HTTP client takes a server's refusals of a request body: a 413 is raised at once,
naming the limit; a 429 `server_busy` is sent again after the server's hint, within the call's
timeout, since the server refused it unread; a full queue's 429 stays the queue's business.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import httpx
import pytest

from dreamlake.lakeshore.errors import (
    PayloadTooLarge,
    QueueFullError,
    ServerBusy,
    Unavailable,
)
from dreamlake.lakeshore.plane import HttpDispatch
from dreamlake.lakeshore.types import SubmitRequest
from dreamlake.lakeshore.work.retry import is_transient

BUSY = {"error": {"code": "server_busy", "message": "busy", "retry_after_s": 0.01}}
TOO_LARGE = {
    "error": {
        "code": "payload_too_large",
        "message": "request body of 9 bytes is over this server's limit of 8 bytes "
        "(7.62939e-06 MiB) per request; its operator can raise it with "
        "`lakeshore server --max-body-mb` (LAKESHORE_MAX_BODY_MB)",
    }
}


class Recorder:
    """A transport answering from a script, one answer per request; the last one repeats."""

    def __init__(self, *answers: tuple[int, dict[str, object]]) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        status, body = self.answers[min(len(self.requests), len(self.answers)) - 1]
        return httpx.Response(status, content=json.dumps(body).encode(), headers=JSON)


JSON = {"content-type": "application/json"}
OK = (201, {"ids": ["01J0000000000000000000000"]})


def plane(recorder: Recorder, timeout_s: float = 5.0) -> HttpDispatch:
    return HttpDispatch(
        "http://plane.test", token="t", timeout_s=timeout_s, transport=httpx.MockTransport(recorder)
    )


def submit(p: HttpDispatch) -> Callable[[], list[str]]:
    return lambda: p.submit("q", [SubmitRequest(payload=b"x")])


def test_413_is_raised_at_once_with_the_servers_words() -> None:
    recorder = Recorder((413, TOO_LARGE))

    with pytest.raises(PayloadTooLarge, match="--max-body-mb") as raised:
        submit(plane(recorder))()

    assert len(recorder.requests) == 1  # never sent again: it would only be refused again
    assert not is_transient(raised.value)


def test_a_busy_server_is_asked_again_until_it_takes_the_request() -> None:
    recorder = Recorder((429, BUSY), (429, BUSY), OK)

    assert submit(plane(recorder))() == ["01J0000000000000000000000"]

    assert len(recorder.requests) == 3
    assert len({r.content for r in recorder.requests}) == 1  # the same request each time


def test_a_server_busy_for_the_whole_timeout_is_raised_as_transient() -> None:
    recorder = Recorder((429, BUSY))
    start = time.monotonic()

    with pytest.raises(ServerBusy, match=r"still refused after 0\.2 s") as raised:
        submit(plane(recorder, timeout_s=0.2))()

    assert time.monotonic() - start < 2.0
    assert len(recorder.requests) >= 2
    assert isinstance(raised.value, Unavailable) and is_transient(raised.value)
    assert raised.value.retry_after_s == 0.01


def test_a_429_without_an_error_body_reads_as_busy() -> None:
    """A proxy's bare 429 page: retried the same way, then raised as busy."""

    def bare(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, content=b"<html>slow down</html>")

    p = HttpDispatch("http://plane.test", timeout_s=0.01, transport=httpx.MockTransport(bare))

    with pytest.raises(ServerBusy, match="HTTP 429"):
        submit(p)()


def test_a_full_queues_429_is_not_the_servers_business() -> None:
    full = {"error": {"code": "queue_full", "message": "full", "retry_after_s": 1, "block": False}}
    recorder = Recorder((429, full))

    with pytest.raises(QueueFullError):
        submit(plane(recorder))()

    assert len(recorder.requests) == 1
