"""A daemon's channel (issue 48): one WebSocket at `/v1/channel` carrying its requests, and
the server's pushes to it.

Each message from the daemon is `[n, method, path?query, body]`: one request, run through this
same app in-process, so that auth, routing, the body budget, /metrics and every handler are
the ones HTTP requests meet (nothing is written twice); its answer goes back as `[n, status,
content type, body]` the moment the handler has it, before any work deferred past the answer.
Requests are tasks of their own: a claim long-poll held for a minute does not hold up the
acks behind it.

`[0, "hello", namespace, worker]` names the worker the channel serves. From then on the
channel waits on the waker for a kill request of a job that worker runs (`kill_key`: from any
replica, through the waker's relay) and pushes `[0, "renew"]`: the daemon renews at once and
so learns the kill, where without a channel it learns it at its next renewal (at most a
second later). A push is a hint, never the only word.

The upgrade is authenticated as a request is (a bearer token); each request is authorized
again by its route. Garbage closes the channel with 1003 and changes nothing: a message that
is not the shape above is refused before anything runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, MutableMapping
from typing import Any
from urllib.parse import unquote

import msgpack
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from dreamlake.lakeshore.errors import DispatchError
from dreamlake.lakeshore.plane.channel import PATH, PUSH
from dreamlake.lakeshore.plane.wakeup import kill_key

from .auth import authenticate

log = logging.getLogger("lakeshore.server")

Message = MutableMapping[str, Any]
#: Headers of the upgrade that no request carries (the rest, the token first, each request does).
_UPGRADE_ONLY = frozenset(
    {b"upgrade", b"connection", b"sec-websocket-key", b"sec-websocket-version",
     b"sec-websocket-extensions", b"sec-websocket-protocol", b"content-length"}
)  # fmt: skip
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
#: The longest a channel waits on the waker before looking again (a wait is cheap; this only
#: bounds how long a lost wake-up could leave a kill unpushed, and the renewal covers that).
KILL_WAIT_S = 30.0
INTERNAL = b'{"error": {"code": "internal", "message": "internal error"}}'


async def channel(ws: WebSocket) -> None:
    state = ws.app.state.lakeshore
    try:
        await authenticate(ws, state.store, None, state.grants)  # type: ignore[arg-type]
    except DispatchError as exc:
        await ws.close(code=4401 if exc.status == 401 else 4403, reason=str(exc)[:120])
        return
    await ws.accept()
    link = _Link(ws)
    try:
        while True:
            raw = await ws.receive_bytes()
            try:
                message = msgpack.unpackb(raw)
                link.take(message)
            except (ValueError, TypeError, msgpack.UnpackException) as exc:
                await ws.close(code=1003, reason=f"not a channel message: {exc}"[:120])
                return
    except (WebSocketDisconnect, RuntimeError):
        pass  # the daemon went away (RuntimeError: it did between two receives)
    finally:
        await link.close()


class _Link:
    """One open channel's requests in flight, its kill watch, and its sends (one at a time)."""

    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws
        self.headers = [(k, v) for k, v in ws.scope["headers"] if k not in _UPGRADE_ONLY]
        self.tasks: set[asyncio.Task[None]] = set()
        self.sending = asyncio.Lock()
        self.closed = asyncio.Event()
        self.watch: asyncio.Task[None] | None = None

    def take(self, message: Any) -> None:
        """Start what `message` asks; ValueError/TypeError: it is not a channel message."""
        if not isinstance(message, list) or not message or not isinstance(message[0], int):
            raise ValueError("a list [n, ...] with a whole number n")
        if message[0] == PUSH:
            if message[1:2] != ["hello"] or len(message) != 4:
                raise ValueError("a message 0 other than [0, 'hello', namespace, worker]")
            ns, worker = message[2], message[3]
            if not isinstance(ns, str) or not isinstance(worker, str):
                raise ValueError("hello's namespace and worker are text")
            if self.watch is not None:
                self.watch.cancel()
            self.watch = self._spawn(self._watch_kills(ns, worker))
            return
        n, method, target, body = _request_parts(message)
        self._spawn(self._serve(n, method, target, body))

    def _spawn(self, work: Awaitable[None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def send(self, message: list[Any]) -> None:
        async with self.sending:
            with contextlib.suppress(WebSocketDisconnect, RuntimeError):
                await self.ws.send_bytes(msgpack.packb(message))

    async def _serve(self, n: int, method: str, target: str, body: bytes | None) -> None:
        answered = asyncio.get_running_loop().create_future()
        app = asyncio.ensure_future(self._run(method, target, body, answered))
        try:
            status, content_type, content = await answered
        except Exception:
            log.exception("channel request %s %s failed", method, target)
            status, content_type, content = 500, "application/json", INTERNAL
        await self.send([n, status, content_type, content])
        await app  # what the handler deferred past its answer

    async def _run(
        self, method: str, target: str, body: bytes | None, answered: asyncio.Future[Any]
    ) -> None:
        scope = _http_scope(self.ws.scope, self.headers, method, target, body)
        sent = False
        status, content_type, chunks = 500, "", []

        async def receive() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body or b"", "more_body": False}
            await self.closed.wait()  # a handler that listens for a disconnect hears of it
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            nonlocal status, content_type
            if message["type"] == "http.response.start":
                status = int(message["status"])
                for k, v in message.get("headers", []):
                    if k.lower() == b"content-type":
                        content_type = v.decode("latin-1")
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body") and not answered.done():
                    answered.set_result((status, content_type, b"".join(chunks)))

        try:
            await self.ws.app(scope, receive, send)
        except Exception as exc:
            if not answered.done():
                answered.set_exception(exc)
            return
        if not answered.done():
            answered.set_result((status, content_type, b"".join(chunks)))

    async def _watch_kills(self, ns: str, worker: str) -> None:
        state = self.ws.app.state.lakeshore
        try:  # a token hears only of its own namespaces' workers
            await authenticate(self.ws, state.store, ns, state.grants)  # type: ignore[arg-type]
        except DispatchError as exc:
            await self.ws.close(code=4403, reason=str(exc)[:120])
            return
        waker = state.store.waker
        key = kill_key(ns, worker)
        generation = waker.generation
        while True:
            await waker.wait_async(generation, KILL_WAIT_S, work=[key])
            now = waker.generation  # read first: a kill after it is seen next round (or twice)
            if waker.moved(generation, key):
                await self.send([PUSH, "renew"])
            generation = now

    async def close(self) -> None:
        self.closed.set()
        for task in list(self.tasks):
            task.cancel()
        for task in list(self.tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _http_scope(
    upgrade: Message,
    headers: list[tuple[bytes, bytes]],
    method: str,
    target: str,
    body: bytes | None,
) -> dict[str, Any]:
    """The ASGI scope of the HTTP request a channel message stands for."""
    path, _, query = target.partition("?")
    headers = list(headers)
    if body is not None:
        headers += [(b"content-type", b"application/msgpack"),
                    (b"content-length", str(len(body)).encode())]  # fmt: skip
    kept = {k: v for k, v in upgrade.items() if k in ("client", "server", "state", "root_path")}
    return {
        **kept,
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "scheme": "https" if upgrade.get("scheme") == "wss" else "http",
        "method": method,
        "path": unquote(path),
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "headers": headers,
    }


def _request_parts(message: list[Any]) -> tuple[int, str, str, bytes | None]:
    if len(message) != 4:
        raise ValueError("a request is [n, method, path, body]")
    n, method, target, body = message
    if n < 1 or not isinstance(method, str) or method not in _METHODS:
        raise ValueError(f"a request's method is one of {', '.join(sorted(_METHODS))}")
    if not isinstance(target, str) or not target.startswith("/"):
        raise ValueError("a request's path is text starting with '/'")
    if body is not None and not isinstance(body, bytes):
        raise ValueError("a request's body is bytes or nil")
    return n, method, target, body


def route() -> WebSocketRoute:
    """The channel's route, mounted beside the app's HTTP routes."""
    return WebSocketRoute(PATH, channel)
