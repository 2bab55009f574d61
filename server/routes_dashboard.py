"""The dashboard: static files at `/`, and the one JSON snapshot they poll.

The page is plain HTML/JS/CSS shipped in the package (`server/dashboard/`), so serving it needs
no build step and no extra dependency. It reads the same authenticated API as everything else:
the token is pasted once into the page and kept in the tab's sessionStorage, and the page polls
`GET /v1/namespaces/{ns}/dashboard` about once a second. One snapshot per poll (rather than one
request per queue, worker and chart) keeps a busy page to one store round trip per figure.

Sparklines come from the completion rollup the store keeps as jobs end (migration 21: counts
per queue, second and latency bin), so a page opened now shows the last minutes at once, and a
snapshot reads queues x seconds x bins rows however deep the queues or long the history, where
it once read back every completion of the window (1.3-3.6 s a poll at 1M queued). Latencies are
read from two-digit bins, within 5% of the exact percentile. Frame values are shipped
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

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.pending import COUNTED, pending_label, pending_text
from dreamlake.lakeshore.plane import routes
from dreamlake.lakeshore.plane.auth import READ, format_scopes
from dreamlake.lakeshore.plane.connector import Row
from dreamlake.lakeshore.plane.schedules import ScheduleInfo
from dreamlake.lakeshore.plane.store import WORKER_STALE_S, SqlStore
from dreamlake.lakeshore.types import STATES, Invocation

from .auth import bearer
from .endpoint import Api, Call

DASHBOARD_DIR = Path(__file__).resolve().parent / "dashboard"
#: Sparkline window and resolution: 60 points of 5 s. A step is whole seconds or more: the
#: rollup counts by the second.
WINDOW_S = 300.0
STEP_S = 5.0
MIN_STEP_S = 1.0
#: What `?window=` and `?step=` may ask (the document states the same bounds).
WINDOW_RANGE_S = (10.0, 24 * 3600.0)
STEP_RANGE_S = (MIN_STEP_S, 3600.0)
RECENT = 25
EVENTS = 30


def bin_bounds(b: int) -> tuple[float, float]:
    """The durations, in seconds, a rollup bin holds: [low, high).

    A bin is digits * 100 + the first two digits of the duration in whole microseconds
    (schema.sql, migration 21): 512 is [12000, 13000) us, 103 is [3, 4) us.
    """
    digits, lead = divmod(b, 100)
    scale = 10 ** max(0, digits - 2)
    return lead * scale / 1e6, (lead + 1) * scale / 1e6


def _percentile(hist: dict[int, int], q: float) -> float | None:
    """The `q` quantile of a histogram of bins, as its bin's midpoint (None: empty)."""
    total = sum(hist.values())
    if not total:
        return None
    rank = min(total, max(1, math.ceil(q * total)))
    seen = 0
    for b in sorted(hist):
        seen += hist[b]
        if seen >= rank:
            low, high = bin_bounds(b)
            return (low + high) / 2
    return None  # pragma: no cover - the loop reaches rank by construction


def _series(rows: list[Row], since: float, step_s: float, n: int) -> dict[str, Any]:
    """Per-bucket completions and p50 end-to-end latency of succeeded ones (None: no data),
    from one queue's rollup rows (`at`: the second the jobs ended)."""
    done = [0] * n
    failed = [0] * n
    latencies: list[dict[int, int]] = [{} for _ in range(n)]
    waits: dict[int, int] = {}
    all_latencies: dict[int, int] = {}
    for r in rows:
        count, kind, b = int(r["n"]), r["kind"], int(r["bin"])
        if kind == "wait":
            waits[b] = waits.get(b, 0) + count
            continue
        i = min(n - 1, max(0, int((r["at"] - since) // step_s)))
        done[i] += count
        if kind == "latency":
            latencies[i][b] = latencies[i].get(b, 0) + count
            all_latencies[b] = all_latencies.get(b, 0) + count
        else:
            failed[i] += count
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
    """A recent row, with why it waits in the words `lakeshore jobs show` uses (None: nothing
    to say, or no longer queued) and their short form for the row's tag."""
    row = asdict(inv)
    row.pop("result", None)
    queued = inv.state == "queued"
    row["pending"] = pending_text(inv.pending_reason, inv.unschedulable_reason) if queued else None
    row["pending_label"] = pending_label(inv.pending_reason) if queued else None
    return row


def _brief_schedule(info: ScheduleInfo) -> dict[str, Any]:
    """What the page shows of a schedule: when it fires, when it last did, what it missed."""
    keys = ("name", "cron", "tz", "queue", "state", "next_fire_at", "last_fired_at", "missed")
    row = asdict(info)
    return {key: row[key] for key in keys} | {"fired": info.fired, "last_error": info.last_error}


def snapshot(store: SqlStore, ns: str, window_s: float, step_s: float) -> dict[str, Any]:
    """Everything the page shows, read in a few queries, none of which grows with the queue.

    The window ends with the current second (the rollup's last, still filling) and is `window_s`
    long, in points of `step_s`.
    """
    now = time.time()
    n = max(1, int(window_s // step_s))
    since = math.floor(now) + 1 - n * step_s
    queues = [q for q in store.queues([ns]) if q.namespace == ns]
    depth = store.depth_by_state(ns)
    pending = store.pending_by_queue(ns)
    by_queue: dict[str, list[Row]] = {}
    for r in store.rollup_since(ns, math.floor(since)):
        by_queue.setdefault(r["queue"], []).append(r)
    workers = store.workers(ns)
    running = store.running_by_worker(ns)
    in_use = store.gpus_in_use(ns)
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
                # Of the queued: those nothing could ever run, those that wait for a launch.
                "pending": {r: pending.get(q.name, {}).get(r, 0) for r in COUNTED},
                "members": len(members),
                "slots": sum(int(w.info.get("concurrency", 1)) for w in members),
                "maps": store.maps_in_flight(ns, q.name),
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
            # {GPU index: share held by running jobs}: what of `gpus` is in use now.
            "gpus_used": {str(i): share for i, share in in_use.get(w.name, {}).items()},
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
        "schedules": [_brief_schedule(info) for info in store.schedules(ns)],
        # Once: a busy window was read from its newest rows. Never now: the rollup is whole.
        "sampled": False,
    }


async def dashboard(call: Call) -> dict[str, Any]:
    low, high = WINDOW_RANGE_S
    window_s = call.query.number("window", WINDOW_S, low=low, high=high, unit="seconds")
    low, high = STEP_RANGE_S
    step_s = call.query.number("step", STEP_S, low=low, high=high, unit="seconds")
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
        routes.DASHBOARD,
        dashboard,
        "One snapshot for the dashboard: queues with depth by state and sparklines, workers, "
        "recent invocations, queue events, schedules",
        response="Dashboard",
        query=("window", "step"),
        scopes=(READ,),
    ),
    Api(
        routes.WHOAMI,
        whoami,
        "The namespace, org and label of the presented token",
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
