"""A shared pool's delay with real processes: one `lakeshore-daemon` on `pool-a` and `pool-b`
(`pool-a` its primary) against a real `lakeshore server`, as issue 33 reproduced it.

Warmed up by a job on `pool-a`, the daemon waits for its next job in a claim that carries the
warm-up's ack and that the server holds: the claim a submit hands its jobs to. A job then
submitted to `pool-b` is not its to take until it has waited `steal_delay_s`; the row's own
timestamps say how long it waited.

Run twice: as reproduced (a daemon that sits down to wait once the warm-up's ack is in, which
on today's code raced this test's submit about half the time), and with `--prefetch 1`, whose
claim already waits on the server while the warm-up runs (the prefetch path; it certainly
waits there when the submit comes).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jobs
import pytest
from daemon_harness import DaemonProcess

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane import HttpDispatch

pytestmark = pytest.mark.slow

STEAL_DELAY_S = 5.0


@pytest.mark.parametrize("extra", [[], ["--prefetch", "1"]], ids=["as-reproduced", "prefetch"])
def test_a_pool_worker_takes_another_primarys_job_only_after_the_steal_delay(
    server: Any,
    tenant: Any,
    http_plane: Callable[..., HttpDispatch],
    tmp_path: Path,
    extra: list[str],
) -> None:
    plane = http_plane(namespace=tenant.namespace, token=tenant.token)
    elasticity = {"kind": "elastic", "min": 0, "max": 2, "pool": "mixed"}
    for name in ("pool-a", "pool-b"):
        plane.create_queue(name, elasticity={**elasticity, "steal_delay_s": STEAL_DELAY_S})
    env = {
        "LAKESHORE_URL": server.url,
        "LAKESHORE_TOKEN": tenant.token,
        "LAKESHORE_NAMESPACE": tenant.namespace,
    }
    daemon = DaemonProcess(
        tmp_path, "pool-worker", ["-q", "pool-a", "-q", "pool-b", *extra], env=env
    )
    try:
        daemon.ready()
        a = dls.SyncQueue("pool-a", dispatch=plane)
        b = dls.SyncQueue("pool-b", dispatch=plane)
        assert a.result(a.submit(dls.thunk(jobs.noop)), timeout=30) is None  # warmed up

        stolen = b.submit(dls.thunk(jobs.noop))
        own = a.submit(dls.thunk(jobs.noop))
        a.result(own, timeout=30)
        b.result(stolen, timeout=30 + STEAL_DELAY_S)
    finally:
        daemon.stop()

    row, first = plane.invocation(stolen), plane.invocation(own)
    assert row.worker == first.worker == "pool-worker"
    assert row.started_at is not None and first.started_at is not None
    assert row.started_at - row.created_at >= STEAL_DELAY_S, "stolen before its delay"
    assert first.started_at < row.started_at  # its primary's job, submitted later, went first
