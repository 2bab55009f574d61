"""The dashboard: static files at `/`, and the one JSON snapshot they poll.

The page is plain HTML/JS/CSS shipped in the package (`server/dashboard/`), so serving it needs
no build step and no extra dependency. It reads the same authenticated API as everything else:
the token is pasted once into the page and kept in the tab's sessionStorage, and the page polls
`GET /v1/namespaces/{ns}/dashboard` about once a second. One snapshot per poll (rather than one
request per queue, worker and chart) keeps a busy page to one store round trip per figure.

Sparklines are computed here from the completions in a recent window, so a page opened now
shows the last minutes at once instead of filling up while it watches. Frame values are shipped
as the stored bytes (base64 in JSON): the page decodes plain msgpack itself and shows anything
richer (pickled objects, arrays) as a placeholder, so the control plane still never decodes a
payload.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..errors import InvalidArgument
from ..plane.auth import READ, format_scopes
from ..plane.store import WORKER_STALE_S, SqlStore
from ..types import STATES, Invocation
from .auth import bearer
from .endpoint import Api, Call

DASHBOARD_DIR = Path(__file__).resolve().parent / "dashboard"
#: Sparkline window and resolution: 60 points of 5 s.
WINDOW_S = 300.0
STEP_S = 5.0
RECENT = 25
EVENTS = 30
#: Completions read per snapshot at most; a busier window is sampled from its newest rows.
MAX_FINISHED_ROWS = 20000


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _series(rows: list[dict[str, Any]], since: float, step_s: float, n: int) -> dict[str, Any]:
    """Per-bucket completions and p50 end-to-end latency of succeeded ones (None: no data)."""
    done = [0] * n
    failed = [0] * n
    latencies: list[list[float]] = [[] for _ in range(n)]
    waits: list[float] = []
    all_latencies: list[float] = []
    for r in rows:
        i = min(n - 1, max(0, int((r["finished_at"] - since) // step_s)))
        done[i] += 1
        if r["state"] == "succeeded":
            lat = max(0.0, r["finished_at"] - r["created_at"])
            latencies[i].append(lat)
            all_latencies.append(lat)
        else:
            failed[i] += 1
        if r["started_at"] is not None:
            waits.append(max(0.0, r["started_at"] - r["created_at"]))
    return {
        "completed": done,
        "failed": failed,
        "latency_p50": [_percentile(bucket, 0.5) for bucket in latencies],
        "window": {
            "completed": sum(done),
            "failed": sum(failed),
            "throughput_per_s": sum(done) / (step_s * n),
            "latency_p50": _percentile(all_latencies, 0.5),
            "latency_p95": _percentile(all_latencies, 0.95),
            "wait_p50": _percentile(waits, 0.5),
        },
    }


def _brief_invocation(inv: Invocation) -> dict[str, Any]:
    row = asdict(inv)
    row.pop("result", None)
    return row


def snapshot(store: SqlStore, ns: str, window_s: float, step_s: float) -> dict[str, Any]:
    """Everything the page shows, read in a few queries."""
    now = time.time()
    n = max(1, int(window_s // step_s))
    since = now - n * step_s
    queues = [q for q in store.queues([ns]) if q.namespace == ns]
    depth = store.depth_by_state(ns)
    finished = store.finished_since(ns, since, limit=MAX_FINISHED_ROWS)
    by_queue: dict[str, list[dict[str, Any]]] = {}
    for r in finished:
        by_queue.setdefault(r["queue"], []).append(r)
    workers = store.workers(ns)
    running = store.running_by_worker(ns)
    queue_rows = []
    for q in queues:
        members = [
            w
            for w in workers
            if now - w.heartbeat_at < WORKER_STALE_S
            and (q.name in w.queues or (q.name == "default" and not w.queues))
        ]
        queue_rows.append(
            {
                **asdict(q),
                "depth": {s: depth.get(q.name, {}).get(s, 0) for s in STATES},
                "members": len(members),
                "slots": sum(int(w.info.get("concurrency", 1)) for w in members),
                **_series(by_queue.get(q.name, []), since, step_s, n),
            }
        )
    worker_rows = [
        {
            "id": w.id,
            "name": w.name,
            "host": w.host,
            "pid": w.pid,
            "state": w.state,
            "queues": w.queues,
            "slots": int(w.info.get("concurrency", 1)),
            "busy": running.get(w.name, 0),
            "gpus": w.info.get("gpus", []),
            "labels": w.info.get("labels", {}),
            "load": w.load,
            "heartbeat_age_s": max(0.0, now - w.heartbeat_at),
            "stale": now - w.heartbeat_at >= WORKER_STALE_S,
        }
        for w in workers
    ]
    return {
        "namespace": ns,
        "now": now,
        "window": {"since": since, "step_s": step_s, "points": n},
        "queues": queue_rows,
        "workers": worker_rows,
        "recent": [_brief_invocation(i) for i in store.invocations(ns, limit=RECENT)],
        "events": store.namespace_events(ns, limit=EVENTS),
        "sampled": len(finished) >= MAX_FINISHED_ROWS,
    }


async def dashboard(call: Call) -> dict[str, Any]:
    window_s = call.query.number("window", WINDOW_S, low=10.0, high=24 * 3600.0)
    step_s = call.query.number("step", STEP_S, low=0.5, high=3600.0)
    if window_s / step_s > 2000:
        raise InvalidArgument("query parameters 'window' / 'step' may make at most 2000 points")
    return await call.run(snapshot, call.store, call.ns, window_s, step_s)


async def whoami(call: Call) -> dict[str, Any]:
    """The namespace a token belongs to (how the page picks its namespace from a pasted token),
    and its scopes (so a script can tell what it may do before it is refused)."""
    scope = call.token
    if scope is None:  # the endpoint always sets it on a route that takes a token
        scope = await call.run(call.store.token_scope, bearer(call.request))
    return {
        "namespace": scope.namespace,
        "org": scope.org,
        "label": scope.label,
        "scopes": format_scopes(scope.scopes).split(),
    }


ROUTES = [
    Api(
        "GET",
        "/dashboard",
        dashboard,
        "One snapshot for the dashboard: queues with depth by state and sparklines, workers, "
        "recent invocations, queue events",
        response="Dashboard",
        query=("window", "step"),
        scopes=(READ,),
    ),
    Api(
        "GET",
        "/v1/whoami",
        whoami,
        "The namespace, org and label of the presented token",
        namespaced=False,
        response="WhoAmI",
        scopes=(),
    ),
]


def install(app: Starlette) -> None:
    """Serve the page at `/` and its files under `/dashboard/`."""

    async def index(request: Request) -> Response:
        return FileResponse(DASHBOARD_DIR / "index.html", headers={"cache-control": "no-cache"})

    app.router.routes.extend(
        [
            Route("/", index, methods=["GET"]),
            Mount("/dashboard", StaticFiles(directory=DASHBOARD_DIR), name="dashboard"),
        ]
    )
