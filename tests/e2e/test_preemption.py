"""Long jobs that survive losing their box (issue 35), with real daemons and a real server.

A numpy training job (200 steps, a checkpoint every 10) starts on daemon A; A loses its box
(SIGTERM, a preemption notice; or kill -9, no notice at all); daemon B, with a LAKESHORE_HOME of
its own (another box, as far as the host tier goes), resumes it from its last checkpoint. The
result equals an uninterrupted run's bit for bit, the steps run in total stay within one
checkpoint interval of 200, and `max_attempts=1` was enough.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import training
from daemon_harness import DaemonProcess, wait_until

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane import HttpDispatch

pytestmark = pytest.mark.slow

STEPS, EVERY = 200, 10


@pytest.fixture
def fleet(
    server: Any, tenant: Any, http_plane: Callable[..., HttpDispatch], tmp_path: Path
) -> Iterator[tuple[HttpDispatch, Callable[..., DaemonProcess]]]:
    """The tenant's plane, and a way to start daemons on their own homes against the server."""
    plane = http_plane(namespace=tenant.namespace, token=tenant.token)
    started: list[DaemonProcess] = []

    def start(name: str, *args: str) -> DaemonProcess:
        home = tmp_path / name
        home.mkdir()
        proc = DaemonProcess(
            home,
            name,
            ["-q", "train", "--kill-grace-s", "1", *args],
            env={
                "LAKESHORE_URL": server.url,
                "LAKESHORE_TOKEN": tenant.token,
                "LAKESHORE_NAMESPACE": tenant.namespace,
            },
        )
        started.append(proc)
        return proc.ready()

    try:
        yield plane, start
    finally:
        for proc in started:
            proc.stop()


def _at_step(log: Path, step: int) -> Callable[[], bool]:
    return lambda: any(s >= step for _, s in training.steps_run(str(log)))


def _check_resumed(q: dls.SyncQueue, plane: HttpDispatch, inv: str, log: Path) -> None:
    result = q.result(inv, timeout=120)
    assert isinstance(result, np.ndarray)
    assert result.tobytes() == training.plain(STEPS).tobytes()  # bit for bit
    steps = training.steps_run(str(log))
    assert len(steps) <= STEPS + EVERY, f"{len(steps)} steps run"
    assert {a for a, _ in steps} == {1, 2}
    row = q.status(inv)
    assert (row.state, row.attempt, row.preemptions, row.max_attempts) == ("succeeded", 2, 1, 1)
    resumes = [f for f in plane.frames(inv) if f.kind == "RESUME"]
    assert len(resumes) == 1
    marker = dls.decode(resumes[0].value or b"")
    assert marker["attempt"] == 2 and marker["checkpoint"]


def test_a_job_preempted_by_sigterm_resumes_on_another_daemon(
    fleet: tuple[HttpDispatch, Callable[..., DaemonProcess]], tmp_path: Path
) -> None:
    plane, start = fleet
    q = dls.SyncQueue("train", dispatch=plane)
    log = tmp_path / "steps.log"
    a = start("box-a")
    inv = q.submit(dls.thunk(training.train, STEPS, EVERY, str(log), 0.02), max_attempts=1)
    wait_until(_at_step(log, 50), timeout=60, what="step 50 on daemon A")

    a.signal(signal.SIGTERM)  # the box is going away: a notice

    assert a.wait(timeout=60) == 0
    row = q.status(inv)
    assert (row.state, row.preemptions, row.ended_by) == ("queued", 1, "notice")
    assert row.checkpoint is not None
    at_notice = max(s for _, s in training.steps_run(str(log)))
    start("box-b")
    _check_resumed(q, plane, inv, log)
    # The job checkpointed where the notice found it: nothing was run twice.
    assert len(training.steps_run(str(log))) == STEPS
    assert min(s for a_, s in training.steps_run(str(log)) if a_ == 2) == at_notice + 1


def test_a_job_whose_daemon_is_killed_resumes_from_its_last_checkpoint(
    fleet: tuple[HttpDispatch, Callable[..., DaemonProcess]], tmp_path: Path
) -> None:
    plane, start = fleet
    q = dls.SyncQueue("train", dispatch=plane)
    log = tmp_path / "steps.log"
    a = start("box-a", "--lease-s", "2")
    inv = q.submit(dls.thunk(training.train, STEPS, EVERY, str(log), 0.02), max_attempts=1)
    wait_until(_at_step(log, 55), timeout=60, what="step 55 on daemon A")

    a.kill9()  # no notice: the lease runs out, the sweep counts a preemption

    start("box-b", "--lease-s", "2")
    _check_resumed(q, plane, inv, log)
    assert q.status(inv).ended_by == "daemon_lost"
