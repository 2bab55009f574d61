"""Long jobs that survive losing their box (issue 35), with real daemons and a real server.

A numpy training job (200 steps, a checkpoint every 10) starts on daemon A; A loses its box
(SIGTERM, a preemption notice; or kill -9, no notice at all); daemon B, with a LAKESHORE_HOME of
its own (another box, as far as the host tier goes), resumes it from its last checkpoint. The
result equals an uninterrupted run's bit for bit, the steps run in total stay within one
checkpoint interval of 200, and `max_attempts=1` was enough.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import training
from daemon_harness import DaemonProcess, wait_until
from imds import standin_imds

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane import HttpDispatch
from tests.support.server import LAUNCH, server_process

pytestmark = pytest.mark.slow

STEPS, EVERY = 200, 10


@pytest.fixture
def fleet(
    server: Any, tenant: Any, http_plane: Callable[..., HttpDispatch], tmp_path: Path
) -> Iterator[tuple[HttpDispatch, Callable[..., DaemonProcess]]]:
    """The tenant's plane, and a way to start daemons on their own homes against the server."""
    plane = http_plane(namespace=tenant.namespace, token=tenant.token)
    started: list[DaemonProcess] = []

    def start(name: str, *args: str, env: dict[str, str] | None = None) -> DaemonProcess:
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
                **(env or {}),
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


@pytest.fixture
def imds() -> Iterator[Any]:
    with standin_imds() as server:
        yield server


@pytest.mark.parametrize("mode", ["ec2", "auto"])
def test_an_ec2_spot_notice_preempts_the_job_by_its_deadline(
    fleet: tuple[HttpDispatch, Callable[..., DaemonProcess]], tmp_path: Path, imds: Any, mode: str
) -> None:
    # `ec2` insists on the watch; `auto` (the default, no flag) finds EC2 in a fake sysfs
    plane, start = fleet
    q = dls.SyncQueue("train", dispatch=plane)
    log = tmp_path / "steps.log"
    dmi = tmp_path / "sys" / "devices/virtual/dmi/id"
    dmi.mkdir(parents=True)
    (dmi / "sys_vendor").write_text("Amazon EC2\n")
    a = start(
        "spot-a",
        *(["--spot-notice", "ec2"] if mode == "ec2" else []),
        env={
            "LAKESHORE_IMDS_URL": f"http://127.0.0.1:{imds.server_address[1]}",
            "LAKESHORE_IMDS_POLL_S": "0.2",
            "LAKESHORE_SYS_ROOT": str(tmp_path / "sys"),
        },
    )
    inv = q.submit(dls.thunk(training.train, STEPS, EVERY, str(log), 0.05), max_attempts=1)
    wait_until(_at_step(log, 20), timeout=60, what="step 20 on the spot daemon")
    deadline = time.time() + 120
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(deadline))

    imds.action = {"action": "terminate", "time": stamp}

    assert a.wait(timeout=60) == 0
    notice = a.find("worker.preempt_notice")
    assert notice is not None and notice["reason"] == "EC2 spot terminate"
    assert notice["deadline"] == pytest.approx(int(deadline), abs=1)
    detected = a.find("spot.detected")
    assert (detected or {}).get("evidence") == ("sys_vendor=Amazon EC2" if mode == "auto" else None)
    row = q.status(inv)
    assert (row.state, row.preemptions, row.ended_by) == ("queued", 1, "notice")
    stopped = max(s for _, s in training.steps_run(str(log)))
    assert dls.decode(row.checkpoint or b"") is not None and stopped < STEPS


def test_drain_preempt_from_the_cli_and_a_command_exiting_75(
    fleet: tuple[HttpDispatch, Callable[..., DaemonProcess]],
    tmp_path: Path,
    server: Any,
    tenant: Any,
) -> None:
    plane, start = fleet
    q = dls.SyncQueue("train", dispatch=plane)
    marker = tmp_path / "tempfail"
    command = f"if [ -e {marker} ]; then echo second; else touch {marker}; exit 75; fi"
    ex = q.submit(envelope=dls.Envelope.for_exec(command), max_attempts=1)
    a = start("drain-a")
    assert q.result(ex, timeout=60) == 0
    row = q.status(ex)
    assert (row.attempt, row.preemptions, row.ended_by) == (2, 1, "exit75")

    # A run far longer than a drain takes to reach a busy daemon (its next heartbeat, at most
    # HEARTBEAT_MAX_S): the notice ends it, never its own last step (at 200 steps the job
    # ended in 10 s and a loaded box let it finish first).
    log = tmp_path / "steps.log"
    endless = 100 * STEPS
    inv = q.submit(dls.thunk(training.train, endless, EVERY, str(log), 0.05), max_attempts=1)
    wait_until(_at_step(log, 10), timeout=60, what="step 10")
    env = {
        **os.environ,
        "LAKESHORE_URL": server.url,
        "LAKESHORE_TOKEN": tenant.token,
        "LAKESHORE_NAMESPACE": tenant.namespace,
    }
    drained = subprocess.run(
        [sys.executable, "-c", LAUNCH, "daemon", "drain", "drain-a", "--preempt"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert drained.returncode == 0, drained.stderr
    assert "drain-a: preempting" in drained.stderr + drained.stdout

    assert a.wait(timeout=60) == 0
    row = q.status(inv)
    assert (row.state, row.preemptions, row.ended_by) == ("queued", 1, "notice")


def test_a_checkpoint_over_the_storage_limit_is_refused_and_the_last_one_stays(
    tmp_path: Path,
) -> None:
    with (
        server_process(tmp_path / "small", extra_args=("--max-object-mb", "1")) as srv,
        HttpDispatch(srv.url, token=srv.token) as plane,
    ):
        home = tmp_path / "box"
        home.mkdir()
        proc = DaemonProcess(
            home,
            "small-box",
            ["-q", "train"],
            env={"LAKESHORE_URL": srv.url, "LAKESHORE_TOKEN": srv.token},
        )
        try:
            proc.ready()
            q = dls.SyncQueue("train", dispatch=plane)
            inv = q.submit(dls.thunk(training.checkpoint_too_big, 2 * 2**20))
            answer = q.result(inv, timeout=60)
        finally:
            proc.stop()
    assert answer["error"].startswith("PayloadTooLarge") and "--max-object-mb" in answer["error"]
    assert answer["last"] == {"step": 1}


def test_a_command_reads_its_deadline_from_the_file_lakeshore_preempt_deadline_names(
    fleet: tuple[HttpDispatch, Callable[..., DaemonProcess]],
) -> None:
    plane, start = fleet
    q = dls.SyncQueue("train", dispatch=plane)
    command = (
        'echo "before the notice: $(cat "$LAKESHORE_PREEMPT_DEADLINE" 2>/dev/null || echo none)"\n'
        'trap \'echo "deadline $(cat "$LAKESHORE_PREEMPT_DEADLINE")"; exit 75\' TERM\n'
        "echo started\n"
        "while :; do sleep 0.05; done\n"
    )
    inv = q.submit(envelope=dls.Envelope.for_exec(command), max_attempts=1)
    a = start("exec-a", "--preempt-grace-s", "20")
    lines = lambda: [dls.decode(f.value or b"") for f in plane.frames(inv) if f.kind == "VALUE"]  # noqa: E731
    wait_until(lambda: "started" in lines(), timeout=60, what="the command started")

    noticed = time.time()
    a.signal(signal.SIGTERM)

    assert a.wait(timeout=60) == 0
    row = q.status(inv)
    assert (row.state, row.preemptions, row.attempt) == ("queued", 1, 1)
    assert lines()[0] == "before the notice: none"
    [said] = [line for line in lines() if line.startswith("deadline ")]
    deadline = float(said.split()[1])
    assert noticed <= deadline <= time.time() + 20  # the end of the grace, as epoch seconds
    assert deadline - noticed == pytest.approx(20, abs=5)
