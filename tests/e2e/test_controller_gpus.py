"""The controller scales on GPU demand, end to end (issue 34, items 5 and 7): a real `lakeshore
server`, a real `lakeshore-controller --url`, and the local provider launching real daemons that
declare the provider's shape (`--gpus 8 --gpu-type H100 --gpu-memory-gb 80`), on a CPU box.

No daemon is up. A job asking 16 GPUs (no 8-GPU launch runs it) launches nothing and is named
unschedulable by the server's sweep; two jobs asking 4 GPUs each (`waiting_for_capacity` until
then) make the controller launch one daemon, not three, which runs them side by side on four
GPUs each.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import jobs
import pytest
from daemon_harness import JOBS_PATH, daemon_env, kill_local_daemons, wait_until

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane import HttpDispatch
from tests.support.server import running_server

pytestmark = pytest.mark.slow

CONTROLLER = "from dreamlake.lakeshore.controller.main import main; main()"
TICKS = ("--interval-s", "0.2", "--boot-timeout-s", "30")
SHAPE = {"gpus": 8, "gpu_type": "H100", "gpu_memory_gb": 80}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    home = tmp_path / "home"
    with running_server(home) as (url, token):
        yield url, token, home


def launched(plane: HttpDispatch, queue: str) -> list[str]:
    """Every daemon the controller says it launched for `queue`."""
    return [
        name
        for e in plane.events(queue, limit=200)
        if e["kind"] == "scaled" and e["detail"].get("direction") == "up"
        for name in e["detail"]["launch"]
    ]


def test_jobs_packed_onto_a_provider_shape_launch_one_daemon_and_16_gpus_none(
    server: tuple[str, str, Path], tmp_path: Path
) -> None:
    url, token, home = server
    state_dir = tmp_path / "local-state"
    controller = None
    with HttpDispatch(url, token=token) as plane:
        plane.add_provider(
            "gpu8",
            "local",
            {
                "state_dir": str(state_dir),
                "env": {"PYTHONPATH": JOBS_PATH},
                "lease_s": 3,
                "shape": SHAPE,
            },
        )
        plane.create_queue(
            "train",
            elasticity={"kind": "fully_elastic", "max": 4, "idle_s": 600, "provider": "gpu8"},
        )
        q = dls.SyncQueue("train", dispatch=plane)
        try:
            # the launched daemons reach the server with the admin token (a test)
            args = ["--url", url, "--token", token, "--plane-token", token, *TICKS]
            with (home / "controller.log").open("wb") as log:  # the child keeps its own copy
                controller = subprocess.Popen(
                    [sys.executable, "-c", CONTROLLER, *args],
                    env=daemon_env(home),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            # a job no daemon and no launch could run, and two 4-GPU jobs one 8-GPU daemon runs
            huge = q.submit(dls.thunk(jobs.placed), resources={"gpus": 16})
            fours = [
                q.submit(dls.thunk(jobs.placed, str(tmp_path / "meet"), 2), resources={"gpus": 4})
                for _ in range(2)
            ]
            seen = q.status(fours[0])
            if seen.state == "queued" and seen.pending_reason is not None:
                assert seen.pending_reason == "waiting_for_capacity"
            results = [q.result(inv, timeout=60) for inv in fours]
            # the 16-GPU job is named within 10 s (the server's sweep runs every 5 s)
            wait_until(
                lambda: q.status(huge).pending_reason == "unschedulable",
                timeout=10,
                what="the 16-GPU job named unschedulable",
            )
            words = q.status(huge).unschedulable_reason or ""
            # (the middle says what daemons are up: none, or the launched one, as the sweep saw)
            assert words.startswith("needs 16 GPUs; ")
            assert words.endswith("provider gpu8 launches daemons with 8 x H100 (80 GB)")

            assert len(launched(plane, "train")) == 1
            [worker] = plane.workers()
            gpus = worker.info["gpus"]
            assert [(g["name"], g["memory_mb"]) for g in gpus] == [("H100", 80 * 1024)] * 8
            # side by side (each waited for the other), four GPUs each, none shared
            cuda = sorted(r["cuda"] for r in results)
            assert [len(c.split(",")) for c in cuda] == [4, 4]
            assert set(cuda[0].split(",")).isdisjoint(cuda[1].split(","))
            # one daemon in all: the 16-GPU job was no demand, the two 4-GPU jobs one daemon's
            assert len(launched(plane, "train")) == 1
        finally:
            if controller is not None and controller.poll() is None:
                controller.terminate()
                controller.wait(10)
            kill_local_daemons(state_dir)
