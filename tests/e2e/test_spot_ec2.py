"""The EC2 spot path end to end (issue 35): a notice, a checkpoint, a reclaim, a replacement.

A real server and real daemons; AWS is the one fake: moto's EC2 for the provider, and a stand-in
instance metadata service for the daemon's notice. The controller (in this process, over the
server's fleet routes) launches a spot instance; a daemon plays that instance. The metadata
service then announces the interruption: the daemon sets `preempting`, the training job
checkpoints and goes back to the queue as preempted. EC2 reclaims the instance; the next tick
records the reclaim, and with `spot_fallback_after: 1` launches its replacement on-demand. A
daemon playing the replacement finishes the job from its checkpoint, bit for bit.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import training
from daemon_harness import DaemonProcess, wait_until
from imds import standin_imds

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.controller.loop import Controller, Settings
from dreamlake.lakeshore.plane import HttpDispatch
from dreamlake.lakeshore.plane.http import HttpFleet
from dreamlake.lakeshore.providers.ec2 import Ec2Provider
from tests.support.aws import mocked_ec2
from tests.support.server import running_server

boto3 = pytest.importorskip("boto3")
moto = pytest.importorskip("moto")

pytestmark = pytest.mark.slow

REGION = "us-east-1"
CONFIG = {
    "region": REGION,
    "instance_type": "g5.xlarge",
    "ami": "ami-12345678",
    "spot": True,
    "spot_fallback_after": 1,
}
STEPS, EVERY = 200, 10


@pytest.fixture
def ec2(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with mocked_ec2(monkeypatch, REGION) as client:
        yield client


def _reclaim(ec2: Any, instance_id: str) -> None:
    """What EC2 does at a spot notice's deadline: it ends the instance, for its own reason."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends
    from moto.ec2.models.instances import StateReason

    ec2.terminate_instances(InstanceIds=[instance_id])
    vm = ec2_backends[DEFAULT_ACCOUNT_ID][REGION].get_instance(instance_id)
    vm.state_reason = StateReason(
        "Server.SpotInstanceTermination: Spot instance termination",
        "Server.SpotInstanceTermination",
    )


def _vm(ec2: Any, instance_id: str) -> dict[str, Any]:
    raw: dict[str, Any] = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0][
        "Instances"
    ][0]
    return raw


def test_a_spot_notice_checkpoints_the_job_and_the_controller_replaces_the_reclaimed_vm(
    ec2: Any, tmp_path: Path
) -> None:
    with running_server(tmp_path / "server") as (url, token), standin_imds() as imds:
        plane = HttpDispatch(url, token=token)
        fleet = HttpFleet(url, token=token)
        daemons: list[DaemonProcess] = []
        try:
            plane.add_provider("spot", "ec2", CONFIG)
            plane.create_queue("train", elasticity={"kind": "fixed", "max": 1, "provider": "spot"})
            controller = Controller(
                fleet,
                Settings(scale_down_window_s=0.0, plane_url=url, plane_token=token),
                provider_factory=lambda info: Ec2Provider(info.name, info.config, client=ec2),
            )
            env = {"LAKESHORE_URL": url, "LAKESHORE_TOKEN": token}

            def play(instance: Any, *args: str, **more: str) -> DaemonProcess:
                """A daemon standing for `instance`, named as its user-data would name it."""
                proc = DaemonProcess(
                    tmp_path / instance.daemon,
                    instance.daemon,
                    ["-q", "train", "--kill-grace-s", "1", *args],
                    env={**env, **more},
                )
                daemons.append(proc)
                return proc.ready()

            [first] = _launched(controller, ec2)
            assert _vm(ec2, first.id).get("InstanceLifecycle") == "spot"
            spot = play(
                first,
                "--spot-notice",
                "ec2",
                LAKESHORE_IMDS_URL=f"http://127.0.0.1:{imds.server_address[1]}",
                LAKESHORE_IMDS_POLL_S="0.2",
            )
            q = dls.SyncQueue("train", dispatch=plane)
            log = tmp_path / "steps.log"
            inv = q.submit(dls.thunk(training.train, STEPS, EVERY, str(log), 0.05), max_attempts=1)
            wait_until(
                lambda: any(s >= 20 for _, s in training.steps_run(str(log))),
                timeout=60,
                what="step 20 on the spot daemon",
            )
            assert controller.tick()[0].current == 1  # the daemon serves: nothing to do

            # Two minutes' notice from the metadata service.
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 120))
            imds.action = {"action": "terminate", "time": stamp}

            assert spot.wait(timeout=60) == 0
            row = q.status(inv)
            assert (row.state, row.preemptions, row.ended_by) == ("queued", 1, "notice")
            assert row.checkpoint is not None
            assert spot.find("worker.preempt_notice")["reason"] == "EC2 spot terminate"

            # The deadline: EC2 takes the VM back. The next tick replaces it, on-demand.
            _reclaim(ec2, first.id)
            [decision] = controller.tick()
            assert decision.launch == 1
            kinds = {e["kind"]: e["detail"] for e in plane.events("train", limit=50)}
            assert kinds["reclaimed"]["instance"] == first.id
            assert kinds["reclaimed"]["why"] == "terminated: Server.SpotInstanceTermination"
            assert kinds["spot_fallback"]["market"] == "on-demand"
            [second] = [i for i in _live(ec2) if i.id != first.id]
            assert "InstanceLifecycle" not in _vm(ec2, second.id)  # on-demand
            assert second.tags["lakeshore:spot-fallback"] == "reclaims"

            # The replacement takes the job up from its checkpoint.
            play(second)
            result = q.result(inv, timeout=120)
            assert isinstance(result, np.ndarray)
            assert result.tobytes() == training.plain(STEPS).tobytes()
            assert len(training.steps_run(str(log))) <= STEPS + EVERY
            row = q.status(inv)
            assert (row.state, row.attempt, row.preemptions) == ("succeeded", 2, 1)
        finally:
            for proc in daemons:
                proc.stop()
            fleet.close()
            plane.close()


def _live(ec2: Any) -> list[Any]:
    provider = Ec2Provider("spot", CONFIG, client=ec2)
    return [i for i in provider.list() if i.state in ("pending", "running")]


def _launched(controller: Controller, ec2: Any) -> list[Any]:
    [decision] = controller.tick()
    assert decision.launch == 1
    return _live(ec2)
