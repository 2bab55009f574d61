"""Time the client's sending: a connection that stalls while the server waits for it is closed.

uvicorn times only an idle keep-alive connection, and only until its first byte arrives. A client
that connects and sends nothing, sends half a request line (slowloris, HTTP/0.9), or sends a body
shorter than its Content-Length holds its connection, its buffers and (once its headers are in)
a task forever. ASGI cannot help: the app is called after the headers, and a body stall inside
`receive()` is invisible to a middleware once an early answer has been sent and uvicorn is
discarding the rest. So this is uvicorn's httptools protocol with two deadlines added:

- headers: complete request headers within `header_timeout_s` of the connection opening, or of
  the first byte of the next request on a keep-alive connection (the time before that byte is
  uvicorn's keep-alive timeout). Bytes arriving do not extend it: slowloris sends them slowly.
- body: no more than `body_timeout_s` without a byte while the server is reading a body. When
  the server is not reading (the app has not asked for more yet and uvicorn paused the socket,
  or a client sent `Expect: 100-continue` and waits for the go-ahead) the clock does not run,
  and it starts afresh each time the app asks for more.

An answer that goes out before its request's body is in (a 413, a 429, a 401) leaves the rest of
the body coming. uvicorn reads and drops it, but on a connection it then closes (the request said
`Connection: close`, or was HTTP/1.0) it closed at once, and the body bytes still arriving made
the kernel answer with a reset, which can destroy the answer before a client that writes its
whole body first reads it. So the close waits for the end of that body (a lingering close, as
nginx does): the rest is read and dropped, then the connection closes cleanly. Either way the
discarding is bounded: at most `DISCARD_MAX_S` after the answer, and no stall longer than the
body timeout; past either the connection is closed.

A request line and headers still incomplete past `MAX_HEADER_BYTES` are refused with 431, as the
timeout alone would let one fast client fill memory with a single endless header for its whole
duration (httptools sets no limit of its own).

Nothing is timed while the server holds a request (a long-poll, a blocking submit): that is
the server's turn, not the client's. On expiry a partial request is answered 408 in the usual
error shape, then the connection is closed; a connection that sent nothing of its next request
is closed without an answer, as an idle keep-alive one is, since a reply to nothing could be
read as the answer to the request the client sends next.

One timer per connection at most, moved only when a deadline comes closer: bytes that arrive
update a timestamp, and a request that arrives whole in one read arms nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import Any, Literal

from starlette.requests import Request
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from dreamlake.lakeshore.errors import DispatchError

from .wire import error_response, wants_json

log = logging.getLogger("lakeshore.server")

#: Defaults of `lakeshore server --header-timeout-s / --body-timeout-s`.
HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0
#: A request line and headers longer than this are refused (431): httptools has no limit of
#: its own, and what it has not parsed yet it holds (uvicorn's h11 protocol stops at 16 KiB).
MAX_HEADER_BYTES = 64 * 1024

#: How long the rest of a body answered early is read and dropped before the connection closes.
DISCARD_MAX_S = 30.0

#: Whose turn it is: the client's (headers, body), or nobody's that is timed here (None: the
#: server is working, or the connection idles under uvicorn's keep-alive timeout).
Phase = Literal["headers", "body", "idle"] | None


#: The scope key under which the protocol leaves a request's uvicorn cycle (`client_gone`).
_CYCLE = "lakeshore.cycle"


def client_gone(scope: Mapping[str, Any]) -> bool | None:
    """Whether the client of this request has hung up, as far as the loop has read: uvicorn
    marks the cycle when the connection is lost. None when the request came through another
    server (a test's in-process client) or while the socket is not being read (a hang-up would
    not show yet): ask ASGI's `receive()` then.

    Polling `receive()` costs a task and a turn of the loop; a claim handed a job asks this on
    a `q.call`'s path, and a turn of the loop there is a turn before the worker hears of it.
    """
    cycle = scope.get(_CYCLE)
    if cycle is None or cycle.flow.read_paused:
        return None
    return bool(cycle.disconnected)


class RequestTimeout(DispatchError):
    code = "request_timeout"
    status = 408


class HeadersTooLarge(DispatchError):
    code = "headers_too_large"
    status = 431


class TimedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with the two deadlines; see `timed_protocol`."""

    header_timeout_s = HEADER_TIMEOUT_S
    body_timeout_s = BODY_TIMEOUT_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase: Phase = None
        self._since = 0.0  # when the phase began (headers) or the last byte came (body)
        self._partial = False  # bytes of a request have arrived in the headers phase
        self._header_bytes = 0  # how many bytes of it, so far
        self._in_body = False  # the parser is inside a request's body
        self._timer: asyncio.TimerHandle | None = None
        self._lingering = False  # a close waits for the end of a body answered early
        self._closing = False  # the next close is at once, lingering or not
        self._discard_timer: asyncio.TimerHandle | None = None

    # -- uvicorn's hooks ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = _HeadWithBody(transport, self.loop, self._linger)  # type: ignore[assignment]
        self.flow = _Flow(transport, self._asked_for_more)
        self._enter("headers")
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._enter(None)
        for timer in (self._timer, self._discard_timer):
            if timer is not None:
                timer.cancel()
        self._timer = self._discard_timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._phase == "idle":
            self._enter("headers")  # the first byte of the next request on a kept-alive one
        if self._phase == "headers":
            self._partial = True
            self._header_bytes += len(data)
        elif self._phase == "body":
            self._since = self.loop.time()
        super().data_received(data)
        if self._phase == "headers" and self._header_bytes > MAX_HEADER_BYTES:
            self._close(
                HeadersTooLarge(
                    f"request line and headers over {MAX_HEADER_BYTES // 1024} KiB and not "
                    "complete yet"
                )
            )
        elif self._phase is not None:
            self._arm()  # a request still incomplete after this read: now it is timed

    def on_headers_complete(self) -> None:
        if self._lingering:
            return  # a request pipelined behind one that closes the connection: not served
        self._in_body = True
        self._enter("body")
        super().on_headers_complete()
        if self.cycle is not None:
            self.scope[_CYCLE] = self.cycle  # type: ignore[literal-required]  # for client_gone

    def on_message_complete(self) -> None:
        self._in_body = False
        if self._discard_timer is not None:
            self._discard_timer.cancel()
            self._discard_timer = None
        if self._lingering:
            self._close_now()  # the body answered early is all in: a clean close
            return
        super().on_message_complete()
        cycle = self.cycle
        # Answered before its body was in (a 413, a 429), the rest discarded: uvicorn armed its
        # keep-alive timer when the answer went out, and the body bytes after it cancelled it,
        # so nothing else would ever close this connection.
        self._enter("headers" if cycle is not None and cycle.response_complete else None)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing() or self.pipeline:
            return
        # Answered early, body still coming: its stall is still timed (phase stays "body"),
        # and so is how long it is discarded in all.
        if not self._in_body:
            self._enter("idle")
        elif self._discard_timer is None:
            self._discard_timer = self.loop.call_later(DISCARD_MAX_S, self._discarded_too_long)

    def shutdown(self) -> None:
        self._closing = True  # the server is stopping: no lingering
        super().shutdown()

    def send_400_response(self, msg: str) -> None:
        self._closing = True  # the parser gave up: nothing after this can be read as a body
        super().send_400_response(msg)

    def _linger(self) -> bool:
        """Whether a close asked for now waits for the end of the request's body: once, for a
        request answered before its body was in (see the module's docstring)."""
        cycle = self.cycle
        if self._closing or self._lingering or not self._in_body:
            return False
        if cycle is None or not cycle.response_complete:
            return False
        self._lingering = True
        return True

    def _close_now(self) -> None:
        self._closing = True
        self._enter(None)
        self.transport.close()

    def _discarded_too_long(self) -> None:
        self._discard_timer = None
        if self._in_body and not self.transport.is_closing():
            log.info(
                "closing connection from %s: the rest of a body answered early was still "
                "coming after %g s",
                _peer(self.client),
                DISCARD_MAX_S,
            )
            self._close_now()

    # -- the deadlines ------------------------------------------------------------------------

    def _enter(self, phase: Phase) -> None:
        self._phase = phase
        self._since = self.loop.time()
        self._partial = False
        self._header_bytes = 0

    def _deadline(self) -> float | None:
        if self._phase == "headers":
            return self._since + self.header_timeout_s
        if self._phase == "body":
            return self._since + self.body_timeout_s
        return None

    def _arm(self) -> None:
        """A timer no later than the current deadline (an earlier one re-arms when it fires)."""
        deadline = self._deadline()
        if deadline is None or (self._timer is not None and self._timer.when() <= deadline):
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_at(deadline, self._check)

    def _check(self) -> None:
        self._timer = None
        if self._phase == "body" and self._server_holds_body():
            self._since = self.loop.time()  # the server's turn: the client is not stalling
        deadline = self._deadline()
        if deadline is None or self.transport.is_closing():
            return
        if self.loop.time() < deadline:
            self._arm()
        elif self._phase == "headers":
            reason = f"request headers not complete after {self.header_timeout_s:g} s"
            self._close(RequestTimeout(f"{reason} (`lakeshore server --header-timeout-s`)"))
        else:
            reason = f"request body stalled: no bytes for {self.body_timeout_s:g} s"
            self._close(RequestTimeout(f"{reason} (`lakeshore server --body-timeout-s`)"))

    def _asked_for_more(self) -> None:
        """The app wants more of the body: the client's turn starts now, not at its last byte
        (which may be long ago if the server was the one not reading)."""
        if self._phase == "body":
            self._since = self.loop.time()

    def _server_holds_body(self) -> bool:
        cycle = self.cycle
        return self.flow.read_paused or (cycle is not None and cycle.waiting_for_100_continue)

    def _close(self, error: DispatchError) -> None:
        """Close the connection; answer `error` first if a request is partly in and unanswered.

        A connection that sent nothing of its next request gets no answer: it could be read as
        the answer to the request the client sends next."""
        log.info("closing connection from %s: %s", _peer(self.client), error)
        cycle = self.cycle
        if self._phase == "headers":
            answer = self._partial
        else:
            answer = cycle is not None and not cycle.response_started
            if cycle is not None and not cycle.response_complete:
                # The app waiting on the body sees the client gone (and answers into nothing).
                cycle.disconnected = True
                cycle.message_event.set()
        if answer:
            self.transport.write(self._answer(error))
        self._close_now()

    def _answer(self, error: DispatchError) -> bytes:
        """`error` in the shape the request asked for (JSON when its headers are not in)."""
        as_json = True
        if self._phase == "body":
            as_json = wants_json(Request(self.scope))  # type: ignore[arg-type]
        message = f"{error}; closing the connection"
        response = error_response(type(error)(message), as_json=as_json)
        status = HTTPStatus(error.status)
        head = [f"HTTP/1.1 {status.value} {status.phrase}".encode()]
        head += [name + b": " + value for name, value in response.raw_headers]
        head += [b"connection: close", b"", b""]
        return b"\r\n".join(head) + bytes(response.body)


class _HeadWithBody:
    """The transport, except that a response's head waits for its body: the two go out in one
    send. uvicorn writes them apart, which costs a second syscall per answer and, with
    TCP_NODELAY, a second segment for the client to read; at a few small answers per RPC that
    was a tenth of the server's CPU. A head with no body right behind it (a streamed answer)
    goes out on the loop's next turn; an interim `100 Continue` is never held."""

    __slots__ = ("_held", "_linger", "_loop", "_transport")

    def __init__(
        self,
        transport: asyncio.Transport,
        loop: asyncio.AbstractEventLoop,
        linger: Callable[[], bool],
    ) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None
        #: Asked on each close: True puts it off (the protocol closes again when it is time).
        self._linger = linger

    def write(self, data: bytes) -> None:
        if self._held is not None:
            data, self._held = self._held + data, None
        elif data.startswith(b"HTTP/1.1 ") and data[9:12] != b"100" and data.endswith(b"\r\n\r\n"):
            self._held = data
            self._loop.call_soon(self._flush)
            return
        self._transport.write(data)

    def _flush(self) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            self._transport.write(held)

    def close(self) -> None:
        self._flush()
        if not self._linger():
            self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _Flow(FlowControl):
    """uvicorn's flow control, telling the protocol each time the app asks for body bytes."""

    def __init__(self, transport: asyncio.Transport, on_resume: Callable[[], None]) -> None:
        super().__init__(transport)
        self._on_resume = on_resume

    def resume_reading(self) -> None:
        self._on_resume()
        super().resume_reading()


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "?"


def timed_protocol(
    *, header_timeout_s: float = HEADER_TIMEOUT_S, body_timeout_s: float = BODY_TIMEOUT_S
) -> type[asyncio.Protocol]:
    """The protocol class for `uvicorn.run(http=...)`, with these deadlines."""
    if not (header_timeout_s > 0 and body_timeout_s > 0):
        raise ValueError("the header and body timeouts must be positive")
    return type(
        "TimedHttpToolsProtocol",
        (TimedHttpToolsProtocol,),
        {"header_timeout_s": header_timeout_s, "body_timeout_s": body_timeout_s},
    )
