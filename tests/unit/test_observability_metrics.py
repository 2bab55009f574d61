"""The controller's and the daemon's metric registries, driven in process.

The controller runs real ticks on the in-memory plane with the recording fake provider, as in
test_controller_loop.py; a provider that fails must show up as a counted error beside the
latency of every call, and desired / current per queue must follow the last tick.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from dreamlake.lakeshore.controller.loop import Controller, Settings
from dreamlake.lakeshore.controller.metrics import ControllerMetrics
from dreamlake.lakeshore.daemon.metrics import DaemonMetrics
from dreamlake.lakeshore.plane import Dispatch
from dreamlake.lakeshore.providers.base import ProviderError
from dreamlake.lakeshore.providers.fake import FakeProvider
from dreamlake.lakeshore.types import Claim, SubmitRequest
from dreamlake.lakeshore.work.slot import Outcome

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(registry: object) -> Samples:
    out: Samples = {}
    text = generate_latest(registry).decode()  # type: ignore[arg-type]
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(found: Samples, name: str, **labels: str) -> float | None:
    return found.get((name, tuple(sorted(labels.items()))))


@pytest.fixture
def d() -> Iterator[Dispatch]:
    plane = Dispatch(":memory:")
    plane.store.add_provider("default", "sim", "fake", {})
    yield plane
    plane.close()


def test_controller_counts_ticks_decisions_sizes_and_provider_calls(d: Dispatch) -> None:
    fake = FakeProvider("sim")
    metrics = ControllerMetrics()
    c = Controller(d.store, Settings(), provider_factory=lambda _: fake, observer=metrics)
    d.create_queue("gpu", elasticity={"kind": "fully_elastic", "max": 3, "provider": "sim"})
    d.submit("gpu", [SubmitRequest(payload=b"x") for _ in range(5)])

    # given a backlog of 5 on an empty fleet, one tick launches 3
    [decision] = c.tick()
    assert decision.launch == 3

    found = samples(metrics.registry)
    assert value(found, "lakeshore_controller_ticks_total", result="ok") == 1.0
    assert value(found, "lakeshore_controller_tick_decisions_total", **_target("launch")) == 1.0
    queue = {"namespace": "default", "queue": "gpu", "target": decision.target}
    assert value(found, "lakeshore_controller_desired_workers", **queue) == 3.0
    assert value(found, "lakeshore_controller_current_workers", **queue) == 0.0
    call = {"namespace": "default", "provider": "sim", "kind": "fake"}
    assert value(found, "lakeshore_controller_provider_call_seconds_count", **call, call="list")
    assert value(found, "lakeshore_controller_provider_call_seconds_count", **call, call="launch")
    assert value(found, "lakeshore_controller_provider_errors_total", **call, call="launch") is None
    assert (value(found, "lakeshore_controller_last_tick_timestamp_seconds") or 0) > 0

    # when the cloud refuses the next launch (more jobs, room left), the error is counted
    fake.fail_launch = ProviderError("out of capacity")
    fake.register_all(d.store)
    d.create_queue("cpu", elasticity={"kind": "fully_elastic", "max": 1, "provider": "sim"})
    d.submit("cpu", [SubmitRequest(payload=b"x")])
    c.tick()
    found = samples(metrics.registry)
    assert value(found, "lakeshore_controller_provider_errors_total", **call, call="launch") == 1.0
    assert value(found, "lakeshore_controller_ticks_total", result="ok") == 2.0


def _target(kind: str) -> dict[str, str]:
    return {"namespace": "default", "target": "queue/gpu", "kind": kind}


def test_a_failing_tick_is_counted_as_an_error_and_raises() -> None:
    class Broken:
        def __getattr__(self, name: str) -> object:
            raise RuntimeError("store away")

    metrics = ControllerMetrics()
    c = Controller(Broken(), Settings(), observer=metrics)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="store away"):
        c.tick()
    found = samples(metrics.registry)
    assert value(found, "lakeshore_controller_ticks_total", result="error") == 1.0
    assert value(found, "lakeshore_controller_ticks_total", result="ok") is None


def test_daemon_hooks_count_outcomes_run_time_losses_and_claim_wait() -> None:
    metrics = DaemonMetrics()
    metrics.watch(lambda: [], lambda: True)
    claim = Claim("01J0", "default", "q", b"", 1, "lease", 0.0, None)
    metrics.job_ended(claim, Outcome("ok"), 0.5)
    metrics.job_ended(claim, Outcome("error", error="boom"), 1.5)
    metrics.job_ended(claim, Outcome("lost", error="lease gone"), 2.0)
    metrics.claimed([])  # an empty long-poll: the wait goes on
    metrics.claimed([claim, claim])  # work: one wait observed
    metrics.renewed(3)
    metrics.plane_error("renew", "unreachable")

    found = samples(metrics.registry)
    assert value(found, "lakeshore_daemon_jobs_total", queue="q", outcome="succeeded") == 1.0
    assert value(found, "lakeshore_daemon_jobs_total", queue="q", outcome="failed") == 1.0
    assert value(found, "lakeshore_daemon_jobs_total", queue="q", outcome="lost") == 1.0
    assert value(found, "lakeshore_daemon_job_run_seconds_count", queue="q") == 3.0
    assert value(found, "lakeshore_daemon_job_run_seconds_sum", queue="q") == 4.0
    assert value(found, "lakeshore_daemon_lease_losses_total") == 1.0
    assert value(found, "lakeshore_daemon_claim_wait_seconds_count") == 1.0
    assert value(found, "lakeshore_daemon_lease_renewals_total") == 3.0
    assert value(found, "lakeshore_daemon_plane_errors_total", call="renew", kind="unreachable")
    assert value(found, "lakeshore_daemon_slots", state="busy") == 0.0
    assert value(found, "lakeshore_daemon_draining") == 1.0
