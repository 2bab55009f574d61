"""One wrapper around every route: auth, decoding, error mapping, encoding.

Handlers receive a `Call` (the store, the namespace, checked accessors for body and query) and
return plain data; they never build responses (but for a `raw` route's stream) or catch errors.
Every `DispatchError` becomes its status and `{error: {code, message}}`; anything else is a bug
of ours, logged, and answered 500 in the same shape. Each route is also declared as an `Api`
record so that the OpenAPI document is generated from the same table the router is, and cannot
drift from it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from starlette.background import BackgroundTask, BackgroundTasks
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from dreamlake.lakeshore.errors import DispatchError
from dreamlake.lakeshore.plane import routes
from dreamlake.lakeshore.plane.auth import TokenScope
from dreamlake.lakeshore.plane.store import SqlStore

from .auth import Grants, authenticate, require
from .blocking import run_blocking
from .handoff import Readers, Seats
from .wire import Fields, Query, decode_body, error_response, read_body, respond, wants_json

log = logging.getLogger("lakeshore.server")

P = ParamSpec("P")
T = TypeVar("T")

NS_PREFIX = routes.NS_PREFIX


@dataclass
class ServerState:
    """What every request needs from the app; lives on `app.state.lakeshore`."""

    store: SqlStore
    max_body: int
    grants: Grants
    #: The claim long-polls held here, for submits to hand their jobs to (handoff.py).
    seats: Seats = field(default_factory=Seats)
    #: The submit-and-waits held here, for acks to hand their results to (handoff.py).
    readers: Readers = field(default_factory=Readers)


class InternalError(DispatchError):
    code = "internal"
    status = 500


@dataclass
class Call:
    """One request as a handler sees it."""

    request: Request
    store: SqlStore
    ns: str
    body: Fields
    query: Query
    #: The presented token's scope (None on a route that takes no token).
    token: TokenScope | None = None
    #: Work to run once the answer is sent (`after`).
    deferred: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    def after(self, work: Callable[[], Awaitable[None]]) -> None:
        """Run `work` after the answer has gone out: bookkeeping (metrics) that nobody waits
        for stays off the path of a worker that was just handed a job, or of a `q.call`
        whose result just arrived."""
        self.deferred.append(work)

    def param(self, name: str) -> str:
        return str(self.request.path_params[name])

    @property
    def seats(self) -> Seats:
        seats: Seats = self.request.app.state.lakeshore.seats
        return seats

    @property
    def readers(self) -> Readers:
        readers: Readers = self.request.app.state.lakeshore.readers
        return readers

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a blocking store call in a worker thread."""
        return await run_blocking(fn, *args, **kwargs)


Handler = Callable[[Call], Awaitable[Any]]


@dataclass(frozen=True)
class Api:
    """A route: how it is served and how the OpenAPI document describes it. What the route is
    (method, path, retry rule, what /metrics counts) is its `Route`, declared in the SDK's
    plane/routes.py, which the HTTP plane sends too."""

    route: routes.Route
    handler: Handler
    summary: str
    status: int = 200
    auth: bool = True
    #: OpenAPI component names for the request body and the response (None: no body).
    body: str | None = None
    response: str | None = None
    query: tuple[str, ...] = ()
    #: The token scopes that open this route, any one of them (docs/security.md); () on a route
    #: any valid token may call. What a submitted payload carries is checked by its handler.
    scopes: tuple[str, ...] = ()
    #: The handler reads the request body itself (a stream) and returns its own `Response`:
    #: the object routes, whose bodies go to storage in chunks instead of into memory.
    raw: bool = False

    @property
    def method(self) -> str:
        return self.route.method

    @property
    def path(self) -> str:
        return self.route.path

    @property
    def namespaced(self) -> bool:
        return self.route.namespaced

    @property
    def full_path(self) -> str:
        return self.route.full_path

    def mount(self) -> Route:
        """The starlette route that serves this entry."""
        return Route(
            self.full_path.replace("{channel}", "{channel:path}"),
            _endpoint(self),
            methods=[self.method],
            name=f"{self.method} {self.full_path}",
        )


def _endpoint(api: Api) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        as_json = wants_json(request)
        try:
            state: ServerState = request.app.state.lakeshore
            ns = request.path_params.get("ns")
            token = None
            if api.auth:
                token = await authenticate(request, state.store, ns, state.grants)
                require(token, api.scopes, f"{request.method} {request.scope['path']}")
            # One expression: the raw bytes are freed once decoded, not held through the call.
            body = (
                {}
                if api.raw
                else decode_body(await read_body(request), request.headers.get("content-type", ""))
            )
            call = Call(request, state.store, ns or "", Fields(body), Query(request), token)
            data = await api.handler(call)
        except DispatchError as exc:
            return error_response(exc, as_json=as_json)
        except Exception as exc:
            log.exception("unexpected error on %s %s", request.method, request.url.path)
            return error_response(
                InternalError(f"internal error: {type(exc).__name__}"), as_json=as_json
            )
        if isinstance(data, Response):  # a raw route's own answer (a stream)
            return data
        response = respond(data, status=api.status if data is not None else 204, as_json=as_json)
        if call.deferred:
            # Handed over, not shared: deferred work refers to the call (and so to its body),
            # and a call that held it back would be a reference cycle, freed only when the
            # cyclic GC next looks at old objects. Sixteen 60 MB submits stayed in memory for
            # minutes that way (issue 33, item 7c).
            deferred, call.deferred = call.deferred, []
            response.background = BackgroundTasks([BackgroundTask(work) for work in deferred])
        return response

    return endpoint
