"""The controller end to end: a real `lakeshore-controller`, the local provider, real daemons.

A fully_elastic queue at zero gets 50 jobs; the controller launches daemon processes, they drain
the queue, and after idle_s the controller drains them and they leave: back to zero. A second
controller started meanwhile stands by and does nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import jobs
import pytest
from daemon_harness import JOBS_PATH, daemon_env, pid_alive, wait_until

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane import Dispatch

pytestmark = pytest.mark.slow

CONTROLLER = "from dreamlake.lakeshore.controller.main import main; main()"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def plane(home: Path) -> Iterator[Dispatch]:
    with Dispatch(home / "lakeshore.db") as plane:
        yield plane


def start_controller(home: Path, *extra: str) -> subprocess.Popen[bytes]:
    log_path = home / f"controller-{len(list(home.glob('controller-*.log')))}.log"
    with log_path.open("wb") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [
                sys.executable,
                "-c",
                CONTROLLER,
                "--store",
                str(home / "lakeshore.db"),
                "--interval-s",
                "0.2",
                "--boot-timeout-s",
                "30",
                "--log-level",
                "debug",
                *extra,
            ],
            env=daemon_env(home),
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def instances(state_dir: Path) -> list[dict[str, object]]:
    """The provider's instance records; one the controller forgets between the listing and
    the read (it deletes the record of an instance it has reaped) is gone, not an error."""
    found = []
    for path in state_dir.glob("*.json"):
        try:
            found.append(json.loads(path.read_text()))
        except FileNotFoundError:
            continue
    return found


def test_fully_elastic_queue_scales_from_zero_to_work_and_back(home: Path, plane: Dispatch) -> None:
    state_dir = home / "local-state"
    plane.add_provider(
        "here",
        "local",
        {"state_dir": str(state_dir), "env": {"PYTHONPATH": JOBS_PATH}, "lease_s": 3},
    )
    plane.create_queue(
        "burst", elasticity={"kind": "fully_elastic", "max": 3, "idle_s": 1, "provider": "here"}
    )
    controller = start_controller(home)
    standby = None
    try:
        # given an empty fleet, 50 jobs arrive
        q = dls.SyncQueue("burst", dispatch=plane)
        invs = [q.submit(dls.thunk(jobs.square, i)) for i in range(50)]

        # daemons appear (launched by the controller, registered on the plane)
        wait_until(lambda: len(plane.workers()) == 3, timeout=20, what="3 daemons registered")
        assert all(w.name.startswith("burst-") for w in plane.workers())

        # a second controller stands by: one tick's attempt finds the lock taken
        standby = subprocess.run(
            [sys.executable, "-c", CONTROLLER, "--store", str(home / "lakeshore.db"), "--once"],
            env=daemon_env(home),
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert "another controller leads" in standby.stderr

        # they drain the queue
        assert [q.result(inv, timeout=20) for inv in invs] == [i * i for i in range(50)]

        # and after idle_s the fleet goes back to zero: rows gone, processes gone
        wait_until(lambda: not plane.workers(), timeout=20, what="every daemon gone")
        wait_until(lambda: not instances(state_dir), timeout=10, what="no local instances")
        # every scale-down ends in a `terminated` event, whether the daemon exited first or the
        # controller terminated its instance (it records that on its next tick)
        wait_until(
            lambda: "terminated" in [e["kind"] for e in plane.events("burst", limit=200)],
            timeout=10,
            what="a terminated event",
        )
        kinds = [e["kind"] for e in plane.events("burst", limit=200)]
        assert "scaled" in kinds and "terminated" in kinds
        down = [
            e["detail"]
            for e in plane.events("burst", limit=200)
            if e["kind"] == "scaled" and e["detail"]["direction"] == "down"
        ]
        assert down and "scale to zero" in down[0]["reason"]
    finally:
        stop(controller)
        for record in instances(state_dir):  # never leave daemons behind a failed test
            pid = int(record["pid"])  # type: ignore[call-overload]
            if pid_alive(pid):
                subprocess.run(["kill", "-9", str(pid)], check=False)
