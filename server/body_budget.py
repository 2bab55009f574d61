"""How much of request bodies the server holds in memory: a limit each, and a budget for all.

A body is held whole from its first byte to the end of its request (read, decoded, stored, and
through a `?result_wait=` or a blocking submit's wait), so concurrent uploads add up: sixteen
60 MB submits took one server from 46 MB to 2.25 GB. This middleware bounds the sum.

- A declared body (Content-Length) above the per-request limit is refused with 413, and one
  that would take the bodies in flight past the budget with 429 and Retry-After, both before a
  byte of it is read. An admitted one holds its declared size of the budget until its request
  has been answered, since that is how long its bytes (and their decoded copy) live.
- A streamed body (chunked, no length) is counted as it is read: 413 when it passes the limit,
  429 when the budget runs out under it; what was read is dropped with the request.
- Bodies of `SMALL_BODY_BYTES` or less are never refused for the budget. uvicorn buffers that
  much of every connection before it stops reading anyway, so refusing them would save nothing,
  and claims, heartbeats, lease renewals and small acks keep flowing while big uploads fill it.

Requests the app names `exempt` skip both bounds: object uploads (`routes_objects.py`) stream
to storage a chunk at a time, so their size says nothing about memory; their route bounds them
with its own limit (`--max-object-mb`) before reading.

Over budget is a refusal, not a queue: a waiting request would tie up a connection and a task
without telling its client anything, while a 429 says when to come back, and behind a load
balancer the retry may reach an idle replica. The SDK retries it by itself (`ServerBusy`).
uvicorn discards, unbuffered, the rest of a body the app did not read once the answer is out,
and keeps the connection; one that closes after the answer (`Connection: close`, HTTP/1.0)
closes once that body is in (client_timeouts.py). Either way a client that writes the whole
body before reading its answer (http.client, curl, a raw socket) reads the 413 or 429 instead
of a reset.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dreamlake.lakeshore.errors import DispatchError, PayloadTooLarge, ServerBusy

from .wire import error_response, wants_json

#: What a connection buffers regardless (uvicorn's high-water mark): exempt from the budget.
SMALL_BODY_BYTES = 64 * 1024
#: The Retry-After of a 429: about how long a big upload in flight takes to be stored.
RETRY_AFTER_S = 1.0
#: The options an operator raises the two bounds with, named in the refusals.
LIMIT_OPTION = "`lakeshore server --max-body-mb` (LAKESHORE_MAX_BODY_MB)"
BUDGET_OPTION = "`lakeshore server --body-budget-mb` (LAKESHORE_BODY_BUDGET_MB)"


class ClientGone(DispatchError):
    """The client hung up (or was cut off for stalling) before its body was complete.

    Raised where the body is read so the request ends quietly: the answer goes nowhere, and
    Starlette's own `ClientDisconnect` would be logged as a server error with a traceback.
    """

    code = "client_gone"
    status = 400


def check_bounds(max_body: int, budget: int) -> None:
    """Refuse a budget no body could fit: one between the two bounds would get 429 forever."""
    if max_body < 1 or budget < max_body:
        raise ValueError(
            f"the request-body budget ({budget} bytes) must be at least the per-request limit "
            f"({max_body} bytes), which must be positive"
        )


def _mib(n: int) -> str:
    return f"{n} bytes ({n / 2**20:g} MiB)"


@dataclass
class BodyLedger:
    """The two bounds and what is held against them now, shared with `/metrics`."""

    max_body: int
    budget: int
    #: Bytes of request bodies admitted and not yet answered (exempt small ones left out).
    in_flight: int = 0
    #: Refusals so far: 413 (over the limit) and 429 (over the budget).
    refused_too_large: int = 0
    refused_busy: int = 0

    def __post_init__(self) -> None:
        check_bounds(self.max_body, self.budget)

    def admit(self, declared: int) -> DispatchError | None:
        """The refusal of a declared body, or None when it may be read."""
        if declared > self.max_body:
            return self.too_large(f"request body of {declared} bytes")
        if declared > SMALL_BODY_BYTES and self.in_flight + declared > self.budget:
            return self.busy(declared)
        return None

    def too_large(self, what: str) -> PayloadTooLarge:
        self.refused_too_large += 1
        return PayloadTooLarge(
            f"{what} is over this server's limit of {_mib(self.max_body)} per request; "
            f"its operator can raise it with {LIMIT_OPTION}"
        )

    def busy(self, size: int) -> ServerBusy:
        self.refused_busy += 1
        return ServerBusy(
            f"the server holds {self.in_flight} bytes of request bodies in flight, and "
            f"{size} more would pass its budget of {_mib(self.budget)} ({BUDGET_OPTION}); "
            f"nothing was changed: send it again in {RETRY_AFTER_S:g} s",
            retry_after_s=RETRY_AFTER_S,
        )


class BodyBudget:
    """ASGI middleware: `BodyBudget(app, ledger=BodyLedger(max_body=..., budget=...))`;
    `exempt(scope)` names requests whose bodies stream elsewhere than memory."""

    def __init__(
        self, app: ASGIApp, *, ledger: BodyLedger, exempt: Callable[[Scope], bool] | None = None
    ) -> None:
        self.app = app
        self.ledger = ledger
        self.exempt = exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (self.exempt is not None and self.exempt(scope)):
            await self.app(scope, receive, send)
            return
        declared, streamed = _body_headers(scope)
        if declared is None and not streamed:
            await self.app(scope, receive, send)  # no body: a GET, a bodiless POST
            return
        meter = _Meter(self.ledger)
        if declared is not None:
            refusal = self.ledger.admit(declared)
            if refusal is not None:
                await _answer(scope, receive, send, refusal)
                return
            meter.reserve(declared)
        try:
            await self.app(
                scope, meter.receive(receive, counted=declared is None), meter.send(send)
            )
        except (PayloadTooLarge, ServerBusy, ClientGone) as exc:
            # Only a route that reads its body outside `endpoint.py` lets these through (the
            # endpoint answers them itself); a started answer cannot be replaced.
            if not meter.answered:
                await _answer(scope, receive, send, exc)
        finally:
            self.ledger.in_flight -= meter.held


class _Meter:
    """One request's share of the budget, and the `receive` that keeps it honest."""

    def __init__(self, ledger: BodyLedger) -> None:
        self.ledger = ledger
        self.held = 0  # bytes of the budget this request holds
        self.size = 0  # bytes of body read so far
        self.complete = False  # the last body message has been read
        self.answered = False

    def reserve(self, n: int) -> None:
        if n > SMALL_BODY_BYTES:
            self.ledger.in_flight += n
            self.held = n

    def receive(self, inner: Receive, *, counted: bool) -> Receive:
        async def receive() -> Message:
            message = await inner()
            kind = message["type"]
            if kind == "http.request":
                self.complete = not message.get("more_body", False)
                if counted:
                    self._count(len(message.get("body", b"")))
            elif kind == "http.disconnect" and not self.complete:
                raise ClientGone("the client went away before its request body was complete")
            return message

        return receive

    def send(self, inner: Send) -> Send:
        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.answered = True
            await inner(message)

        return send

    def _count(self, n: int) -> None:
        """A streamed body's bytes: refused past the limit, or past the budget once not small."""
        ledger = self.ledger
        self.size += n
        if self.size > ledger.max_body:
            raise ledger.too_large(f"request body (streamed, {self.size} bytes so far)")
        if self.size > SMALL_BODY_BYTES:
            grow = self.size - self.held
            if ledger.in_flight + grow > ledger.budget:
                raise ledger.busy(grow)
            ledger.in_flight += grow
            self.held += grow


def _body_headers(scope: Scope) -> tuple[int | None, bool]:
    """(declared length, streamed): what the request says about its body.

    The HTTP parser has already refused a malformed or doubled Content-Length with 400, so a
    value here is digits; anything else is treated as streamed, and counted as read.
    """
    declared: int | None = None
    streamed = False
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                declared = int(value)
            except ValueError:
                streamed = True
        elif name == b"transfer-encoding":
            streamed = True
    if declared == 0:
        declared = None
    return (None if streamed else declared), streamed


async def _answer(scope: Scope, receive: Receive, send: Send, exc: DispatchError) -> None:
    """The refusal in the server's error shape (JSON or msgpack, as the client asked)."""
    response = error_response(exc, as_json=wants_json(Request(scope)))
    await response(scope, receive, send)
