"""`lakeshore-daemon --metrics-port N`: the daemon's own figures for Prometheus.

The server's /metrics sees the queues from the plane's side (depth, submit-to-start); only the
daemon sees the box: which slots are busy, how its jobs ended and how long they ran, how long a
free slot waited for work, whether its leases are renewed or lost, whether the plane answers,
and what its GPUs are doing. Each daemon serves its own registry on its own port, so a scrape
never depends on the plane being reachable (that is when it matters most).

Names are `lakeshore_daemon_*`; server/grafana/ ships a dashboard and alert rules over them,
and tests/e2e/test_observability.py checks that every name those use is exposed here.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dreamlake.lakeshore.types import Claim
from dreamlake.lakeshore.work.observer import WorkerObserver
from dreamlake.lakeshore.work.slot import Outcome, Slot

#: Seconds: a no-op job to a day-long training run.
RUN_BUCKETS = (0.01, 0.05, 0.25, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 86400)
#: Seconds a free slot waited for work: none, a long-poll or two, a quiet queue.
WAIT_BUCKETS = (0.005, 0.025, 0.1, 0.5, 1, 2.5, 5, 15, 60, 300, 1800)
#: How an attempt ended on this box (sdk/work/slot.py's Outcome kinds, as words for a panel).
OUTCOME_NAMES = {
    "ok": "succeeded",
    "error": "failed",
    "died": "died",
    "killed": "killed",
    "timeout": "timeout",
    "lost": "lost",
    "release": "released",
}


class DaemonMetrics(WorkerObserver):
    """One daemon's registry, fed as one of the worker's observers."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.jobs = Counter(
            "lakeshore_daemon_jobs",
            "Attempts this daemon ran to an end, by how the run ended",
            ["queue", "outcome"],
            registry=self.registry,
        )
        self.run_time = Histogram(
            "lakeshore_daemon_job_run_seconds",
            "From a slot starting an attempt to its end (the body's run time, child start "
            "included after a kill)",
            ["queue"],
            buckets=RUN_BUCKETS,
            registry=self.registry,
        )
        self.claim_wait = Histogram(
            "lakeshore_daemon_claim_wait_seconds",
            "How long the daemon, with room for a job, waited until a claim brought one",
            buckets=WAIT_BUCKETS,
            registry=self.registry,
        )
        self.renewals = Counter(
            "lakeshore_daemon_lease_renewals",
            "Leases renewed by the heartbeat (one per job held per renewal)",
            registry=self.registry,
        )
        self.losses = Counter(
            "lakeshore_daemon_lease_losses",
            "Running attempts whose lease was gone (expired and requeued, or ended elsewhere)",
            registry=self.registry,
        )
        self.plane_errors = Counter(
            "lakeshore_daemon_plane_errors",
            "Plane calls that failed: 'unreachable' (retried) or 'refused' (an answer, dropped)",
            ["call", "kind"],
            registry=self.registry,
        )
        self._waiting_since: float | None = None

    # -- the worker's observer hooks (sdk/work/observer.py) ----------------------------------

    def job_ended(self, claim: Claim, outcome: Outcome, run_s: float) -> None:
        self.jobs.labels(claim.queue, OUTCOME_NAMES.get(outcome.kind, outcome.kind)).inc()
        self.run_time.labels(claim.queue).observe(run_s)
        if outcome.kind == "lost":  # found gone at renewal, or a frame post refused for it
            self.losses.inc()

    def claimed(self, claims: Sequence[Claim]) -> None:
        """One claim call answered; a wait spans every empty answer before the one with jobs."""
        now = time.monotonic()
        if self._waiting_since is None:
            self._waiting_since = now
        if claims:
            self.claim_wait.observe(now - self._waiting_since)
            self._waiting_since = None

    def renewed(self, held: int) -> None:
        self.renewals.inc(held)

    def plane_error(self, call: str, kind: str) -> None:
        self.plane_errors.labels(call, kind).inc()

    # -- scrape-time figures --------------------------------------------------------------------

    def watch(self, slots: Callable[[], Sequence[Slot]], draining: Callable[[], bool]) -> None:
        """Read slot states (and GPUs, through NVML) when scraped, never in between."""
        self.registry.register(_BoxCollector(slots, draining))

    def watch_runtimes(self, figures: Callable[[], Mapping[str, float]]) -> None:
        """Job runtimes (issue 46): the box's bundle and environment caches, read when scraped
        (`JobRuntimes.figures`)."""
        self.registry.register(_RuntimeCollector(figures))

    def serve(self, port: int, addr: str = "0.0.0.0") -> int:
        """Serve /metrics on `port` (0 picks a free one) in a daemon thread; the port bound."""
        server, _ = start_http_server(port, addr=addr, registry=self.registry)
        return int(server.server_port)


#: What `JobRuntimes.figures` names, as the counters it is exported as.
RUNTIME_COUNTERS = {
    "bundle_hits": "Jobs whose shipped tree was on this box already",
    "bundle_misses": "Shipped trees fetched from the plane",
    "bundle_bytes_fetched": "Bytes of shipped trees fetched from the plane",
    "environment_hits": "Jobs whose requirements' environment was built already",
    "environment_misses": "Environments built for jobs' requirements (failed builds too)",
    "environment_failures": "Environment builds that failed",
    "environment_build_seconds": "Seconds spent building environments",
}


class _RuntimeCollector(Collector):
    def __init__(self, figures: Callable[[], Mapping[str, float]]) -> None:
        self._figures = figures

    def collect(self) -> Iterator[Metric]:
        figures = self._figures()
        for name, words in RUNTIME_COUNTERS.items():
            counter = CounterMetricFamily(f"lakeshore_daemon_runtime_{name}", words)
            counter.add_metric([], float(figures.get(name, 0)))
            yield counter


class _BoxCollector(Collector):
    def __init__(self, slots: Callable[[], Sequence[Slot]], draining: Callable[[], bool]) -> None:
        self._slots = slots
        self._draining = draining
        self._nvml = _Nvml()

    def collect(self) -> Iterator[Metric]:
        slots = list(self._slots())
        busy = sum(1 for s in slots if s.busy)
        states = GaugeMetricFamily(
            "lakeshore_daemon_slots", "Slots by state (busy: running a job)", labels=["state"]
        )
        states.add_metric(["busy"], float(busy))
        states.add_metric(["idle"], float(len(slots) - busy))
        yield states
        yield GaugeMetricFamily(
            "lakeshore_daemon_draining",
            "1 while the daemon drains (no new claims), else 0",
            value=1.0 if self._draining() else 0.0,
        )
        yield from self._nvml.families()


class _Nvml:
    """Per-GPU memory and utilisation from NVML when pynvml imports; empty families otherwise
    (the names stay listed, so a dashboard over a CPU box shows no data rather than errors)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._module: Any = None
        self._tried = False

    def _pynvml(self) -> Any:
        with self._lock:
            if not self._tried:
                self._tried = True
                try:
                    import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore]

                    pynvml.nvmlInit()
                    self._module = pynvml
                except Exception:  # no library, no driver, no device: no GPU figures
                    self._module = None
            return self._module

    def families(self) -> Iterator[Metric]:
        labels = ["gpu", "uuid"]
        used = GaugeMetricFamily(
            "lakeshore_daemon_gpu_memory_used_bytes", "GPU memory in use (NVML)", labels=labels
        )
        total = GaugeMetricFamily(
            "lakeshore_daemon_gpu_memory_total_bytes",
            "GPU memory on the device (NVML)",
            labels=labels,
        )
        util = GaugeMetricFamily(
            "lakeshore_daemon_gpu_utilization_ratio",
            "Share of the last sample period a kernel ran on the GPU, 0..1 (NVML)",
            labels=labels,
        )
        nvml = self._pynvml()
        if nvml is not None:
            with contextlib.suppress(Exception):  # a device lost mid-read: report what was read
                for i in range(nvml.nvmlDeviceGetCount()):
                    handle = nvml.nvmlDeviceGetHandleByIndex(i)
                    uuid = nvml.nvmlDeviceGetUUID(handle)
                    key = [str(i), uuid.decode() if isinstance(uuid, bytes) else str(uuid)]
                    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                    used.add_metric(key, float(memory.used))
                    total.add_metric(key, float(memory.total))
                    rates = nvml.nvmlDeviceGetUtilizationRates(handle)
                    util.add_metric(key, float(rates.gpu) / 100.0)
        yield used
        yield total
        yield util
