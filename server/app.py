"""The ASGI control plane: `create_app(store)` over the same `SqlStore` as the embedded plane.

Every route goes through one wrapper (`endpoint.py`), which keeps a local round trip short; the
one middleware, `body_budget.py`, bounds the request bodies held in memory and costs a request
without a body one header scan; object uploads (`routes_objects.py`, the plane tier) stream to
the server's storage instead, under their own limit. The lifespan runs the lease sweeper, so an
attempt whose worker vanished is requeued (or ended) within about a second even when nobody is
claiming.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Match, Route

from dreamlake.lakeshore import __version__, codec, logs, protocols
from dreamlake.lakeshore.errors import NotFound
from dreamlake.lakeshore.logs import EventLog
from dreamlake.lakeshore.plane import routes
from dreamlake.lakeshore.plane.store import SqlStore
from dreamlake.lakeshore.storage import Storage
from dreamlake.lakeshore.storage import storage as open_storage

from . import (
    channel,
    metrics,
    routes_admin,
    routes_dashboard,
    routes_fleet,
    routes_invocations,
    routes_jobs,
    routes_objects,
    routes_providers,
    routes_queues,
    routes_retention,
    routes_runtime,
    routes_schedules,
    routes_work,
    routes_workers,
)
from .auth import Grants
from .blocking import run_blocking
from .body_budget import BodyBudget, BodyLedger
from .endpoint import Api, Call, ServerState
from .longpoll import MAX_WAIT_S
from .openapi import document
from .wire import (
    BODY_BUDGET_BYTES,
    MAX_BODY_BYTES,
    MethodNotAllowed,
    error_response,
    wants_json,
)

log = EventLog("lakeshore.server")

#: How often expired leases are swept when nothing else triggers a sweep.
SWEEP_INTERVAL_S = 1.0


def configure_logging(level: str, *, json: bool | None = None) -> None:
    """The server's own lines and uvicorn's access and error logs, in the one format of the
    daemon and the controller (sdk/logs.py: JSON unless stderr is a TTY). An access line is
    `http.request` with the invocation its path names. Call before `uvicorn.run(...,
    log_config=None)`, which then leaves the handlers alone and only sets uvicorn's levels."""
    logs.configure(json=json, level=level)


async def hello(call: Call) -> dict[str, Any]:
    state: ServerState = call.request.app.state.lakeshore
    return {
        "server": "lakeshore",
        "version": __version__,
        "api": "v1",
        "codec_version": codec.CODEC_VERSION,
        # What a producer writes when it knows none of its queue's workers; with workers, it
        # writes the highest protocol they all load (their rows' info.runtime).
        "pickle_protocol": codec.PICKLE_PROTOCOL,
        # This server's own Python, for operators: it never unpickles a payload, so it is not
        # what a thunk must load on (docs/sdk.md, pickle protocols).
        "runtime": {**protocols.runtime(), "role": "server; thunks load on workers"},
        "max_body_bytes": state.max_body,
        "max_object_bytes": call.request.app.state.lakeshore_objects.max_bytes,
        "max_wait_s": MAX_WAIT_S,
        "bytes_in_json": "base64",
    }


def all_apis() -> list[Api]:
    return [
        Api(
            routes.HELLO,
            hello,
            "Versions, codec version and pickle protocol",
            auth=False,
            response="Hello",
        ),
        *routes_invocations.ROUTES,  # first: the hot paths match after the fewest regexes
        *routes_work.ROUTES,
        *routes_queues.ROUTES,
        *routes_workers.ROUTES,
        *routes_jobs.ROUTES,
        *routes_dashboard.ROUTES,
        *routes_providers.ROUTES,
        *routes_schedules.ROUTES,
        *routes_retention.ROUTES,
        *routes_fleet.ROUTES,
        *routes_admin.ROUTES,
        *routes_objects.ROUTES,
        *routes_runtime.ROUTES,
    ]


async def _sweeper(store: SqlStore, interval_s: float) -> None:
    """Requeue expired leases on a timer (a timer, not a wait: nothing signals expiry)."""
    while True:
        try:
            await run_blocking(store.sweep)
        except Exception:  # a failed sweep is retried next tick; never kill the loop
            log.exception("server.sweep_failed")
        await asyncio.sleep(interval_s)


async def _http_error(request: Request, exc: Exception) -> Response:
    """Unknown paths and wrong methods answer in the same error shape as everything else."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status != 405:
        missing = NotFound(f"no route {request.method} {request.url.path}")
        return error_response(missing, as_json=wants_json(request))
    allowed = _allowed_methods(request)
    refused = MethodNotAllowed(
        f"{request.method} is not allowed on {request.url.path}; allowed: {', '.join(allowed)}"
    )
    response = error_response(refused, as_json=wants_json(request))
    response.headers["allow"] = ", ".join(allowed)  # RFC 9110 15.5.6: a 405 lists them
    return response


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route serves on this path. Each `Api` is its own starlette route, so
    the one that raised the 405 knows only its own method: ask them all (a 405 is rare)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        if isinstance(route, Route) and route.methods:
            match, _ = route.matches(request.scope)
            if match is not Match.NONE:
                methods |= route.methods
    return sorted(methods)


def create_app(
    store: SqlStore,
    *,
    max_body: int = MAX_BODY_BYTES,
    body_budget: int = BODY_BUDGET_BYTES,
    sweep_interval_s: float = SWEEP_INTERVAL_S,
    close_store: bool = True,
    retain_frames_s: float | None = None,
    retain_invocations_s: float | None = None,
    retention_interval_s: float = routes_retention.RETENTION_INTERVAL_S,
    storage: str | Storage | None = None,
    max_object: int = routes_objects.MAX_OBJECT_BYTES,
) -> Starlette:
    """The app; `storage` holds plane-tier objects (default: `$LAKESHORE_STORAGE`, else
    `$LAKESHORE_HOME/storage`, as the SDK's), each at most `max_object` bytes."""
    if max_object < 1:
        raise ValueError(f"the object size limit must be positive, got {max_object}")
    objects = routes_objects.ObjectTier(open_storage(storage), max_object)
    bodies = BodyLedger(max_body, body_budget)  # checks the bounds now, not at a first request
    apis = metrics.instrument(all_apis())
    openapi = JSONResponse(document(apis))

    async def openapi_json(request: Request) -> Response:
        return openapi  # always JSON: it is read by tools and people, not by the SDK

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Other processes' commits wake this server's waiters from the start: a first wait
        # that began listening only when it began could miss one that came just before.
        store.waker.listen()
        sweeper = asyncio.create_task(_sweeper(store, sweep_interval_s))
        # Retention (None: off): trims ended invocations' frames, then rows, on a timer.
        retainer = routes_retention.start(
            store, objects, retain_frames_s, retain_invocations_s, retention_interval_s
        )
        log.info("server.ready", version=__version__)
        try:
            yield
        finally:
            log.info("server.stopping")
            await routes_retention.stop(retainer)
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
            if close_store:
                store.close()

    app = Starlette(
        routes=[
            *(api.mount() for api in apis),
            Route("/openapi.json", openapi_json),
            channel.route(),
        ],
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_error},
        middleware=[
            Middleware(BodyBudget, ledger=bodies, exempt=routes_objects.streams_to_storage)
        ],
    )
    app.state.lakeshore = ServerState(store=store, max_body=max_body, grants=Grants())
    app.state.lakeshore_objects = objects
    metrics.install(app, store, bodies)  # /metrics, /healthz, /readyz; counts the wrapped routes
    routes_dashboard.install(app)  # the dashboard page at /
    return app
