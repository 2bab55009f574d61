"""The controller on a real Slurm: `lakeshore server`, `lakeshore-controller --url`, the slurm
provider, daemons started by slurmd. Needs `.ci/slurm-up`'s one-node cluster (8 CPUs, four
declared h100 GPUs); skips without Slurm, fails without it under CI=true.

A fully_elastic queue goes 0 -> 2 -> 0 with its jobs run by the Slurm-started daemons, each on
the GPUs Slurm gave its job; a job that can never start is cancelled as an orphan; a daemon
killed with its job is marked gone by the controller; a drained daemon's job ends.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jobs
import pytest
from daemon_harness import JOBS_PATH, daemon_env, fake_nvidia_smi, wait_until

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane import HttpDispatch
from tests.support.server import running_server
from tests.support.slurm import job_ids, provider_name, require_slurm

pytestmark = pytest.mark.slow

CONTROLLER = "from dreamlake.lakeshore.controller.main import main; main()"


@pytest.fixture
def slurm() -> Iterator[str]:
    """A provider name of this test's own; its jobs are cancelled when the test ends (asked
    for after the server, so that they go first and their daemons still reach it)."""
    require_slurm()
    with provider_name() as name:
        yield name


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    home = tmp_path / "home"
    with running_server(home) as (url, token):
        yield url, token, home


@pytest.fixture
def plane(served: tuple[str, str, Path]) -> Iterator[HttpDispatch]:
    url, token, _ = served
    with HttpDispatch(url, token=token) as plane:
        yield plane


def config(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {
        "state_dir": str(tmp_path / "slurm"),
        "command": [sys.executable, "-m", "dreamlake.lakeshore.daemon"],
        "env": {"PYTHONPATH": JOBS_PATH},
        "cpus_per_task": 1,
        "mem": 256,
        "time": 10,
        "lease_s": 5,
        **extra,
    }


def start_controller(served: tuple[str, str, Path], *extra: str) -> subprocess.Popen[bytes]:
    url, token, home = served
    log = home / "controller.log"
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-c", CONTROLLER, "--url", url, "--token", token, "--plane-token",
             token, "--interval-s", "0.5", "--log-level", "debug", *extra],
            env=daemon_env(home),
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def events(plane: HttpDispatch, queue: str, kind: str) -> list[dict[str, Any]]:
    return [e["detail"] for e in plane.events(queue, limit=200) if e["kind"] == kind]


def scontrol(*args: str) -> str:
    return subprocess.run(["scontrol", *args], capture_output=True, text=True, check=False).stdout


def test_a_fully_elastic_queue_scales_on_slurm_from_zero_to_two_and_back(
    served: tuple[str, str, Path], plane: HttpDispatch, slurm: str, tmp_path: Path
) -> None:
    token = served[1]
    smi = fake_nvidia_smi(tmp_path / "bin", 4)  # the node's four GPUs, as nvidia-smi lists them
    env = {"PYTHONPATH": JOBS_PATH, "PATH": f"{smi}:{os.environ['PATH']}"}
    settings = config(tmp_path, gpus=2, gpu_type="h100", env=env, args=["--gpus-per-job", "2"])
    plane.add_provider(slurm, "slurm", settings)
    plane.create_queue(
        "burst", elasticity={"kind": "fully_elastic", "max": 2, "idle_s": 1, "provider": slurm}
    )
    controller = start_controller(served)
    try:
        # given nothing running, two jobs that only finish while both run at once
        q = dls.SyncQueue("burst", dispatch=plane)
        meeting = str(tmp_path / "meeting")
        invs = [q.submit(dls.thunk(jobs.wait_for_peers, meeting, 2, 60.0)) for _ in range(2)]

        # two Slurm jobs start two daemons, each recording its job on its worker row
        rows = wait_until(
            lambda: len(plane.workers()) == 2 and plane.workers(),
            timeout=90,
            what="two Slurm-started daemons registered",
        )
        live_jobs = job_ids(slurm)
        assert sorted(w.info["slurm"]["job_id"] for w in rows) == live_jobs

        # the token reached them through its file: not in the script, not in what Slurm shows
        for job in live_jobs:
            assert token not in scontrol("show", "job", "-dd", job)
            assert token not in scontrol("write", "batch_script", job, "-")

        # each daemon serves exactly the two GPUs Slurm gave its job, and the jobs succeed there
        results = [q.result(inv, timeout=60) for inv in invs]
        assert sorted(r["cuda"] for r in results) == ["0,1", "2,3"]
        for w in rows:
            allocated = [int(i) for i in w.info["slurm"]["gpus"]]
            assert [g["index"] for g in w.info["gpus"]] == allocated and len(allocated) == 2

        # after idle_s the daemons are drained, leave, and their Slurm jobs end
        wait_until(lambda: not plane.workers(), timeout=60, what="every daemon gone")
        wait_until(lambda: not job_ids(slurm), timeout=30, what="every Slurm job ended")
        down = [e for e in events(plane, "burst", "scaled") if e["direction"] == "down"]
        assert down and "scale to zero" in down[0]["reason"]
        wait_until(
            lambda: len(events(plane, "burst", "terminated")) == 2,
            timeout=30,
            what="a terminated event per daemon",
        )
    finally:
        stop(controller)


def test_a_job_slurm_cannot_start_is_cancelled_as_an_orphan(
    served: tuple[str, str, Path], plane: HttpDispatch, slurm: str, tmp_path: Path
) -> None:
    # two nodes from a one-node partition: Slurm keeps the job pending (PartitionNodeLimit)
    plane.add_provider(slurm, "slurm", config(tmp_path, sbatch_args=["--nodes=2"]))
    plane.create_queue("stuck", elasticity={"kind": "fixed", "max": 1, "provider": slurm})
    controller = start_controller(served, "--boot-timeout-s", "3")
    try:
        first = wait_until(lambda: job_ids(slurm), timeout=30, what="a pending Slurm job")[0]

        orphan = wait_until(
            lambda: [e for e in events(plane, "stuck", "terminated") if e["instance"] == first],
            timeout=30,
            what="the pending job cancelled as an orphan",
        )[0]

        assert orphan["reason"].startswith("orphan: still pending 3s after launch")
        assert "(Partition" in orphan["reason"]  # Slurm's reason for the wait
        wait_until(lambda: first not in job_ids(slurm), timeout=30, what="the job to leave squeue")
    finally:
        stop(controller)


def test_a_daemon_killed_with_its_job_is_marked_gone_and_replaced(
    served: tuple[str, str, Path], plane: HttpDispatch, slurm: str, tmp_path: Path
) -> None:
    plane.add_provider(slurm, "slurm", config(tmp_path))
    plane.create_queue("steady", elasticity={"kind": "fixed", "max": 1, "provider": slurm})
    controller = start_controller(served)
    try:
        [row] = wait_until(plane.workers, timeout=60, what="a Slurm-started daemon")
        job = row.info["slurm"]["job_id"]

        # SIGKILL: the daemon cannot mark its own row gone; the controller sees the job vanish
        subprocess.run(["scancel", "--batch", "--signal=KILL", job], check=True)

        wait_until(
            lambda: plane.worker(row.id).state == "gone", timeout=30, what="the row marked gone"
        )
        [vanished] = wait_until(
            lambda: [e for e in events(plane, "steady", "terminated") if e["instance"] == job],
            timeout=10,
            what="the vanished job's event",
        )
        assert "vanished" in vanished["reason"]
        wait_until(
            lambda: [w for w in plane.workers() if w.id != row.id],
            timeout=60,
            what="a replacement daemon",
        )
    finally:
        stop(controller)


def test_a_two_node_job_starts_two_slurm_daemons_that_run_it_as_a_gang(
    served: tuple[str, str, Path], plane: HttpDispatch, slurm: str, tmp_path: Path
) -> None:
    """Issue 47: a gang's demand is a daemon per part, so the controller submits two Slurm
    jobs at once for one 2-node job (here both land on the one node, as two daemons)."""
    import gang_jobs

    plane.add_provider(slurm, "slurm", config(tmp_path, args=["--advertise-addr", "127.0.0.1"]))
    plane.create_queue(
        "gang", elasticity={"kind": "fully_elastic", "max": 3, "idle_s": 600, "provider": slurm}
    )
    q = dls.SyncQueue("gang", dispatch=plane)
    job = q.submit(dls.thunk(gang_jobs.ranks), nodes=2)
    controller = start_controller(served)
    try:
        out = q.result(job, timeout=120)
        assert (out["rank"], out["nodes"], out["addrs"]) == (0, 2, ["127.0.0.1"] * 2)
        [up, *_] = [e for e in events(plane, "gang", "scaled") if e["direction"] == "up"]
        assert len(up["launch"]) == 2  # both in one tick
        row = q.status(job)
        assert row.gang is not None
        slurm_jobs = {w.name: w.info["slurm"]["job_id"] for w in plane.workers()}
        assert {p["worker"] for p in row.gang["parts"]} <= set(slurm_jobs)
        assert len(set(slurm_jobs.values())) == 2
    finally:
        stop(controller)
