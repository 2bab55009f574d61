"""`/metrics` (Prometheus), `/healthz` and `/readyz` for the control plane.

Two kinds of figures, because they answer different questions:

- Traffic counters and latency histograms are counted by this server process as it answers
  (submits, claims, completions by terminal state, retries, submit-to-start and end-to-end
  latency). They are per process, as Prometheus expects: a fleet of replicas is summed with
  `sum(rate(...))`, and a restart resets them (which `rate` handles).
- Depth, workers and controller decisions are read from the store at scrape time, so every
  replica reports the same truth, including what no route saw (a lease the sweeper expired, a
  deadline that timed a job out, a decision the controller recorded as a queue event).

Counting wraps the route handlers (`instrument`) rather than the store: the handler knows the
namespace, and a wrapper keeps the hot path free of any metrics call when it is not installed.
One exception: the acks a claim carries (the daemon's normal way to settle) are counted by the
claim handler as soon as they commit (`count_acks`), because the claim may then hold its request
for a long-poll, and a completion counted at its end would come late and read as slower.
A failure to count is logged and never fails the request it was counting.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from dreamlake.lakeshore.errors import DispatchError
from dreamlake.lakeshore.ids import ulid_time
from dreamlake.lakeshore.plane.store import WORKER_STALE_S, SqlStore
from dreamlake.lakeshore.types import TERMINAL_STATES

from .blocking import run_blocking
from .body_budget import BodyLedger
from .endpoint import Api, Call, Handler

log = logging.getLogger("lakeshore.server")

#: Queue events that are an operator's lifecycle action; every other kind is a controller
#: decision (scaled up / down, launched, terminated, ...), whatever names the controller uses.
LIFECYCLE_EVENTS = frozenset({"created", "patched", "archived", "unarchived", "drained", "deleted"})
#: Latency buckets from a local round trip (ms) to a long training job (hours).
LATENCY_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    900.0,
    3600.0,
    4 * 3600.0,
    24 * 3600.0,
)
#: How many claimed ids remember their (namespace, queue), so a settle needs no store read.
QUEUE_MEMORY = 100_000
#: /readyz fails when the store does not answer within this.
READY_TIMEOUT_S = 2.0


class StoreCollector(Collector):
    """Figures read from the store at scrape time, over every namespace."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily(
            "lakeshore_invocations",
            "Invocations in each state, per queue (queued and running are the live depth)",
            labels=["namespace", "queue", "state"],
        )
        workers = GaugeMetricFamily(
            "lakeshore_workers",
            "Worker rows by state; 'stale' is alive or draining with no heartbeat for "
            f"{WORKER_STALE_S:g}s",
            labels=["namespace", "state"],
        )
        events = CounterMetricFamily(
            "lakeshore_queue_events",
            "Queue events recorded in the store, by kind",
            labels=["namespace", "queue", "kind"],
        )
        decisions = CounterMetricFamily(
            "lakeshore_controller_decisions",
            "Controller decisions (queue events other than lifecycle actions), by kind",
            labels=["namespace", "queue", "decision"],
        )
        unschedulable = GaugeMetricFamily(
            "lakeshore_jobs_unschedulable",
            "Queued jobs that no live daemon of their queue could ever run (resources), per queue",
            labels=["namespace", "queue"],
        )
        stale_before = time.time() - WORKER_STALE_S
        view = self.store.metrics_view(stale_before)
        depth_rows, worker_rows, event_rows = view["depth"], view["workers"], view["events"]
        for r in depth_rows:
            depth.add_metric([r["namespace"], r["queue"], r["state"]], float(r["n"]))
        by_state: dict[tuple[str, str], float] = {}
        for r in worker_rows:
            state = "stale" if r["stale"] and r["state"] != "gone" else r["state"]
            key = (r["namespace"], state)
            by_state[key] = by_state.get(key, 0.0) + float(r["n"])
        for (ns, state), n in sorted(by_state.items()):
            workers.add_metric([ns, state], n)
        for r in event_rows:
            labels = [r["namespace"], r["queue"], r["kind"]]
            events.add_metric(labels, float(r["n"]))
            if r["kind"] not in LIFECYCLE_EVENTS:
                decisions.add_metric(labels, float(r["n"]))
        for r in view.get("unschedulable", []):
            unschedulable.add_metric([r["namespace"], r["queue"]], float(r["n"]))
        yield depth
        yield unschedulable
        yield workers
        yield events
        yield decisions


class BodyCollector(Collector):
    """The request-body budget of this process (body_budget.py): what it holds, what it refused.

    For sizing `--body-budget-mb`: a gauge that sits at the budget and a climbing 429 count
    mean clients are being turned away; both near zero mean memory could be given back.
    """

    def __init__(self, bodies: BodyLedger) -> None:
        self.bodies = bodies

    def collect(self) -> Iterator[Metric]:
        held = GaugeMetricFamily(
            "lakeshore_request_body_bytes_in_flight",
            "Bytes of request bodies admitted and not yet answered (bodies of 64 KiB or less "
            "are not counted)",
            value=float(self.bodies.in_flight),
        )
        budget = GaugeMetricFamily(
            "lakeshore_request_body_budget_bytes",
            "What request bodies in flight may hold together (--body-budget-mb)",
            value=float(self.bodies.budget),
        )
        refused = CounterMetricFamily(
            "lakeshore_request_bodies_refused",
            "Requests refused for their body: 413 over the per-request limit, 429 over the budget",
            labels=["status"],
        )
        refused.add_metric(["413"], float(self.bodies.refused_too_large))
        refused.add_metric(["429"], float(self.bodies.refused_busy))
        yield held
        yield budget
        yield refused


class ServerMetrics:
    """One app's registry: its traffic counters plus the store collector."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store
        self.registry = CollectorRegistry(auto_describe=False)
        labels = ["namespace", "queue"]
        self.submits = Counter(
            "lakeshore_submits",
            "Invocations accepted by submit (idempotent resubmits included)",
            labels,
            registry=self.registry,
        )
        self.claims = Counter(
            "lakeshore_claims", "Attempts handed to workers", labels, registry=self.registry
        )
        self.completions = Counter(
            "lakeshore_completions",
            "Invocations that reached a terminal state through this server, by state",
            [*labels, "state"],
            registry=self.registry,
        )
        self.retries = Counter(
            "lakeshore_retries",
            "Attempts requeued: a nack with retry, or an operator's `jobs retry`",
            [*labels, "reason"],
            registry=self.registry,
        )
        self.start_latency = Histogram(
            "lakeshore_submit_to_start_seconds",
            "First attempts: from submit to the claim that started the job (time spent queued)",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.end_to_end = Histogram(
            "lakeshore_end_to_end_seconds",
            "From submit to the terminal state, retries included",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(StoreCollector(store))
        self._queues: OrderedDict[str, tuple[str, str]] = OrderedDict()

    # -- what the wrapped handlers report ------------------------------------------------------

    def remember(self, inv_id: str, ns: str, queue: str) -> None:
        self._queues[inv_id] = (ns, queue)
        if len(self._queues) > QUEUE_MEMORY:
            self._queues.popitem(last=False)

    async def queue_of(self, call: Call, inv_id: str) -> tuple[str, str]:
        """(namespace, queue) of an id: remembered from its claim, else one store read."""
        known = self._queues.pop(inv_id, None)
        if known is not None:
            return known
        inv = await call.run(self.store.invocation, call.ns, inv_id)
        return inv.namespace, inv.queue

    def ended(self, ns: str, queue: str, inv_id: str, state: str) -> None:
        self.completions.labels(ns, queue, state).inc()
        start = ulid_time(inv_id)
        if start is not None:
            self.end_to_end.labels(ns, queue).observe(max(0.0, time.time() - start))

    def exposition(self) -> bytes:
        return bytes(generate_latest(self.registry))


def _metrics(call: Call) -> ServerMetrics | None:
    return getattr(call.request.app.state, "lakeshore_metrics", None)


async def _record(call: Call, result: Any, op: str) -> None:
    m = _metrics(call)
    if m is not None:
        await RECORDERS[op](m, call, result)


async def _submitted(m: ServerMetrics, call: Call, result: Any) -> None:
    m.submits.labels(call.ns, call.param("queue")).inc(len(result["ids"]))


async def _claimed(m: ServerMetrics, call: Call, result: Any) -> None:
    one = result.get("claim")
    for claim in result.get("claims") or ([one] if one is not None else []):
        m.claims.labels(claim.namespace, claim.queue).inc()
        m.remember(claim.id, claim.namespace, claim.queue)
        start = ulid_time(claim.id)
        if claim.attempt == 1 and start is not None:
            wait = max(0.0, time.time() - start)
            m.start_latency.labels(claim.namespace, claim.queue).observe(wait)


async def _acked(m: ServerMetrics, call: Call, result: Any) -> None:
    inv_id = call.param("id")
    ns, queue = await m.queue_of(call, inv_id)
    m.ended(ns, queue, inv_id, "succeeded")


async def _acked_many(m: ServerMetrics, call: Call, result: Any) -> None:
    ids = [item["id"] for item in call.body.data["acks"]]
    await _succeeded(m, call, ids, [e is None for e in result["errors"]])


async def _succeeded(
    m: ServerMetrics, call: Call, ids: Sequence[str], took: Sequence[bool]
) -> None:
    for inv_id, ok in zip(ids, took, strict=True):
        if ok:
            ns, queue = await m.queue_of(call, inv_id)
            m.ended(ns, queue, inv_id, "succeeded")


async def count_acks(
    call: Call, ids: Sequence[str], errors: Sequence[DispatchError | None]
) -> None:
    """Count the acks a claim carried, once committed and before the claim waits for a job
    (see the module doc); each refused one (a stale lease) is no completion."""
    m = _metrics(call)
    if m is None:
        return
    try:
        await _succeeded(m, call, ids, [e is None for e in errors])
    except Exception:  # counting is never worth a failed request
        log.exception("metrics: could not count the acks of a claim")


async def _nacked(m: ServerMetrics, call: Call, result: Any) -> None:
    inv_id = call.param("id")
    ns, queue = await m.queue_of(call, inv_id)
    if result["state"] == "queued":
        m.retries.labels(ns, queue, "nack").inc()
    else:
        m.ended(ns, queue, inv_id, result["state"])


async def _ended(m: ServerMetrics, call: Call, result: Any) -> None:
    inv_id = call.param("id")
    ns, queue = await m.queue_of(call, inv_id)
    state = call.body.data.get("state")
    if state in TERMINAL_STATES:
        m.ended(ns, queue, inv_id, str(state))


async def _cancelled(m: ServerMetrics, call: Call, result: Any) -> None:
    if result.get("cancelled"):
        inv = await call.run(m.store.invocation, call.ns, call.param("id"))
        if inv.state == "cancelled":  # a kill request ends later, through `end`
            m.ended(inv.namespace, inv.queue, inv.id, "cancelled")


async def _retried(m: ServerMetrics, call: Call, result: Any) -> None:
    m.retries.labels(result.namespace, result.queue, "operator").inc()


#: What each counted operation records; a route names its operation (`Route.counts`).
RECORDERS: dict[str, Callable[[ServerMetrics, Call, Any], Awaitable[None]]] = {
    "submit": _submitted,
    "claim": _claimed,
    "ack": _acked,
    "acks": _acked_many,
    "nack": _nacked,
    "end": _ended,
    "cancel": _cancelled,
    "retry": _retried,
}


def _counted(handler: Handler, op: str) -> Handler:
    @functools.wraps(handler)
    async def wrapper(call: Call) -> Any:
        result = await handler(call)

        async def record() -> None:
            try:
                await _record(call, result, op)
            except Exception:  # counting is never worth a failed request
                log.exception("metrics: could not count %s", op)

        call.after(record)  # once the answer is out: a claim's worker is waiting for it
        return result

    return wrapper


def instrument(apis: Iterable[Api]) -> list[Api]:
    """The same routes, with the counted ones wrapped (a no-op until `install` runs)."""
    out = []
    for api in apis:
        op = api.route.counts  # declared with the route (plane/routes.py)
        out.append(dataclasses.replace(api, handler=_counted(api.handler, op)) if op else api)
    return out


def install(app: Starlette, store: SqlStore, bodies: BodyLedger | None = None) -> ServerMetrics:
    """Add /metrics, /healthz and /readyz to `app` and start counting its traffic.

    None of the three needs a token: probes and scrapers rarely carry one, and the figures are
    counts and names, never payloads. Bind the server to a private interface (or put the
    scrape path behind your proxy's auth) where queue names are sensitive.
    """
    metrics = ServerMetrics(store)
    if bodies is not None:
        metrics.registry.register(BodyCollector(bodies))
    app.state.lakeshore_metrics = metrics

    async def scrape(request: Request) -> Response:
        body = await run_blocking(metrics.exposition)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        """Ready when the store answers: a replica that cannot reach it should get no traffic,
        nor one whose database file was found damaged."""
        problem = store.integrity_problem()
        if problem is not None:
            return JSONResponse({"status": "unavailable", "detail": problem}, status_code=503)
        try:
            await asyncio.wait_for(run_blocking(store.ping), READY_TIMEOUT_S)
        except Exception as exc:
            detail = f"store unreachable: {type(exc).__name__}: {exc}"
            return JSONResponse({"status": "unavailable", "detail": detail}, status_code=503)
        return JSONResponse({"status": "ready"})

    app.router.routes.extend(
        [
            Route("/metrics", scrape, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
        ]
    )
    return metrics
