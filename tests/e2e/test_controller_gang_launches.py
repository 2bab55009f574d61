"""The controller launches a gang's daemons together (issue 47, item 1): a job of `nodes=2` on a
queue scaled from zero makes one tick launch two daemons, one per part, which then run it as a
gang. With the local provider (real daemon processes, real torch.distributed on gloo) and
EC2 on moto (the test's daemons play the two instances, as in test_spot_ec2.py); the Slurm
case is in test_controller_slurm.py."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gang_jobs
import pytest
from daemon_harness import JOBS_PATH, DaemonProcess, daemon_env, kill_local_daemons

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.controller.loop import Controller, Settings
from dreamlake.lakeshore.plane import Dispatch, HttpDispatch
from dreamlake.lakeshore.plane.http import HttpFleet
from dreamlake.lakeshore.providers.ec2 import Ec2Provider
from tests.support.aws import mocked_ec2
from tests.support.server import running_server

pytestmark = pytest.mark.slow

CONTROLLER = "from dreamlake.lakeshore.controller.main import main; main()"


def launches(plane: Any, queue: str) -> list[list[str]]:
    """The daemons of each scale-up the controller recorded on `queue`."""
    return [
        e["detail"]["launch"]
        for e in plane.events(queue, limit=200)
        if e["kind"] == "scaled" and e["detail"].get("direction") == "up"
    ]


def test_a_two_node_job_launches_two_local_daemons_that_run_it_together(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    state_dir = tmp_path / "local-state"
    controller = None
    with Dispatch(tmp_path / "lakeshore.db") as plane:
        plane.add_provider(
            "here",
            "local",
            {"state_dir": str(state_dir), "env": {"PYTHONPATH": JOBS_PATH}, "lease_s": 3},
        )
        plane.create_queue(
            "train",
            elasticity={"kind": "fully_elastic", "max": 4, "idle_s": 600, "provider": "here"},
        )
        q = dls.SyncQueue("train", dispatch=plane)
        job = q.submit(dls.thunk(gang_jobs.all_reduce), nodes=2)
        try:
            with (tmp_path / "controller.log").open("wb") as log:
                controller = subprocess.Popen(
                    [sys.executable, "-c", CONTROLLER, "--store", str(tmp_path / "lakeshore.db"),
                     "--interval-s", "0.2", "--boot-timeout-s", "60"],
                    env=daemon_env(tmp_path),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )  # fmt: skip
            out = q.result(job, timeout=120)
            assert (out["rank"], out["world"], out["sum"]) == (0, 2, 3.0)
            # both daemons in the first scale-up, not one now and one a tick later
            assert [len(names) for names in launches(plane, "train")] == [2]
            row = q.status(job)
            assert row.gang is not None
            assert len({p["worker"] for p in row.gang["parts"]}) == 2
        finally:
            if controller is not None and controller.poll() is None:
                controller.terminate()
                controller.wait(10)
            kill_local_daemons(state_dir)


REGION = "us-east-1"
#: One A10G a box: a 2-node job of one GPU a part is two instances.
EC2 = {"region": REGION, "instance_type": "g5.xlarge", "ami": "ami-12345678"}


@pytest.fixture
def ec2(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with mocked_ec2(monkeypatch, REGION) as client:
        yield client


def test_a_two_node_job_launches_two_ec2_instances_in_one_tick(ec2: Any, tmp_path: Path) -> None:
    with running_server(tmp_path / "server") as (url, token):
        plane = HttpDispatch(url, token=token)
        fleet = HttpFleet(url, token=token)
        daemons: list[DaemonProcess] = []
        try:
            plane.add_provider("a10", "ec2", EC2)
            plane.create_queue(
                "train", elasticity={"kind": "fully_elastic", "max": 4, "provider": "a10"}
            )
            controller = Controller(
                fleet,
                Settings(scale_down_window_s=0.0, plane_url=url, plane_token=token),
                provider_factory=lambda info: Ec2Provider(info.name, info.config, client=ec2),
            )
            q = dls.SyncQueue("train", dispatch=plane)
            job = q.submit(dls.thunk(gang_jobs.ranks), nodes=2, resources={"gpus": 1})

            [decision] = controller.tick()
            assert (decision.desired, decision.launch) == (2, 2)
            live = [
                i
                for i in Ec2Provider("a10", EC2, client=ec2).list()
                if i.state in ("pending", "running")
            ]
            assert len(live) == 2
            for instance in live:  # each instance's daemon, as its user-data would start it
                proc = DaemonProcess(
                    tmp_path / instance.daemon,
                    instance.daemon,
                    ["-q", "train", "--gpus", "1", "--advertise-addr", "127.0.0.1"],
                    env={"LAKESHORE_URL": url, "LAKESHORE_TOKEN": token},
                )
                daemons.append(proc)
                proc.ready()
            out = q.result(job, timeout=60)
            assert (out["rank"], out["nodes"], out["addrs"]) == (0, 2, ["127.0.0.1"] * 2)
        finally:
            for proc in daemons:
                proc.stop()
            fleet.close()
            plane.close()
