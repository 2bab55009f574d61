"""`lakeshore-controller --metrics-port N`: is the controller ticking, and what it decides.

The server's /metrics counts the controller's queue events as the store holds them; only the
controller itself knows whether it is leading, whether its ticks succeed and how long they take,
what it wants per queue against what it has, and how its providers answer (a cloud API that
times out or refuses is the usual reason a queue does not scale).

Names are `lakeshore_controller_*`; server/grafana/ ships a dashboard and alert rules over them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dreamlake.lakeshore.plane.providers import ProviderInfo

from .decision import Decision

#: Seconds: a local process start to a slow cloud API.
CALL_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
TICK_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class ControllerMetrics:
    """The controller's registry; an `Observer` for `Controller(..., observer=...)`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.ticks = Counter(
            "lakeshore_controller_ticks",
            "Ticks run while leading, by result (error: the tick raised and is retried)",
            ["result"],
            registry=self.registry,
        )
        self.tick_time = Histogram(
            "lakeshore_controller_tick_seconds",
            "How long one tick took (observe, decide, act)",
            buckets=TICK_BUCKETS,
            registry=self.registry,
        )
        self.last_tick = Gauge(
            "lakeshore_controller_last_tick_timestamp_seconds",
            "Unix time of the last tick that succeeded (alerts on a controller that stopped)",
            registry=self.registry,
        )
        self.is_leader = Gauge(
            "lakeshore_controller_leader",
            "1 while this controller holds the leader lock and acts, 0 on standby",
            registry=self.registry,
        )
        self.decisions = Counter(
            "lakeshore_controller_tick_decisions",
            "Per target and tick, what the controller did: launch, drain, terminate or hold",
            ["namespace", "target", "kind"],
            registry=self.registry,
        )
        self.provider_time = Histogram(
            "lakeshore_controller_provider_call_seconds",
            "Provider calls (launch, terminate, list), by provider config and call",
            ["namespace", "provider", "kind", "call"],
            buckets=CALL_BUCKETS,
            registry=self.registry,
        )
        self.provider_errors = Counter(
            "lakeshore_controller_provider_errors",
            "Provider calls that raised, by provider config and call",
            ["namespace", "provider", "kind", "call"],
            registry=self.registry,
        )
        self._sizes = _SizeCollector()
        self.registry.register(self._sizes)

    # -- Observer -------------------------------------------------------------------------------

    def tick_ended(
        self, decisions: Sequence[Decision], seconds: float, error: BaseException | None
    ) -> None:
        self.tick_time.observe(seconds)
        self.ticks.labels("error" if error is not None else "ok").inc()
        if error is not None:
            return
        self.last_tick.set(time.time())
        for d in decisions:
            kinds = [k for k in ("launch", "drain", "terminate") if getattr(d, k)] or ["hold"]
            for kind in kinds:
                self.decisions.labels(d.namespace, d.target, kind).inc()
        self._sizes.decisions = list(decisions)

    def leading(self, leading: bool) -> None:
        self.is_leader.set(1.0 if leading else 0.0)

    def provider_call(
        self, info: ProviderInfo, call: str, seconds: float, error: BaseException | None
    ) -> None:
        labels = (info.namespace, info.name, info.kind, call)
        self.provider_time.labels(*labels).observe(seconds)
        if error is not None:
            self.provider_errors.labels(*labels).inc()

    def serve(self, port: int, addr: str = "0.0.0.0") -> int:
        """Serve /metrics on `port` (0 picks a free one) in a daemon thread; the port bound."""
        server, _ = start_http_server(port, addr=addr, registry=self.registry)
        return int(server.server_port)


class _SizeCollector(Collector):
    """Desired and current workers per queue as of the last tick (a pool's size on each member
    queue); targets that went away drop out instead of lingering at their last value."""

    def __init__(self) -> None:
        self.decisions: list[Decision] = []

    def collect(self) -> Iterator[Metric]:
        labels = ["namespace", "queue", "target"]
        desired = GaugeMetricFamily(
            "lakeshore_controller_desired_workers",
            "Workers the controller wants for the queue's target (after caps and damping)",
            labels=labels,
        )
        current = GaugeMetricFamily(
            "lakeshore_controller_current_workers",
            "Workers the queue's target has (booting and running, not draining)",
            labels=labels,
        )
        for d in self.decisions:
            for queue in d.queues:
                desired.add_metric([d.namespace, queue, d.target], float(d.desired))
                current.add_metric([d.namespace, queue, d.target], float(d.current))
        yield desired
        yield current
