"""Multi-node jobs on real daemons (issue 47): a gang's parts start together with torch's
env:// rendezvous, run real torch.distributed on gloo, and stop together."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane import Dispatch
from tests.support.daemons import DaemonProcess, pid_alive, wait_until

pytest.importorskip("torch")

ROOT = str(Path(__file__).resolve().parents[2])


@pytest.fixture
def two_daemons(tmp_path: Path) -> Iterator[tuple[Dispatch, list[DaemonProcess]]]:
    home = tmp_path / "home"
    args = ["--queue", "gang", "--concurrency", "1", "--advertise-addr", "127.0.0.1"]
    procs = [DaemonProcess(home, f"node-{i}", args, paths=[ROOT]) for i in range(2)]
    try:
        for p in procs:
            p.ready()
        with Dispatch(str(home / "lakeshore.db")) as plane:
            yield plane, procs
    finally:
        for p in procs:
            p.stop()


def test_a_two_node_job_all_reduces_across_two_daemons(two_daemons) -> None:
    from tests.e2e import gang_jobs

    plane, procs = two_daemons
    q = dls.SyncQueue("gang", dispatch=plane)
    job = q.submit(dls.thunk(gang_jobs.all_reduce), nodes=2)
    out = q.result(job, timeout=120)
    assert out["rank"] == 0 and out["world"] == 2 and out["sum"] == 3.0
    assert out["addrs"] == ["127.0.0.1", "127.0.0.1"]
    started = [p.find("gang.started", invocation=job) for p in procs]
    assert all(started), "each daemon ran one part"
    assert sorted(s["rank"] for s in started) == [0, 1]


def test_ddp_across_two_daemons_equals_one_process_over_the_same_batch(two_daemons) -> None:
    from tests.e2e import gang_jobs

    plane, _ = two_daemons
    q = dls.SyncQueue("gang", dispatch=plane)
    job = q.submit(dls.thunk(gang_jobs.ddp_train, 50), nodes=2)
    weights = q.result(job, timeout=180)
    alone = gang_jobs.single_train(50)
    assert weights == pytest.approx(alone, rel=1e-5, abs=1e-6)


def _ended_at(proc: DaemonProcess, job: str) -> float | None:
    for e in proc.events():
        if e.get("invocation") == job and e.get("event") in ENDS:
            return datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00")).timestamp()
    return None


ENDS = ("job.succeeded", "job.failed", "job.died", "job.lost", "job.killed")


def test_one_part_killed_mid_all_reduce_ends_the_other_within_seconds(
    two_daemons, tmp_path: Path
) -> None:
    from tests.e2e import gang_jobs

    plane, procs = two_daemons
    q = dls.SyncQueue("gang", dispatch=plane)
    marker = tmp_path / "rank1.pid"
    job = q.submit(dls.thunk(gang_jobs.reduce_forever, str(marker)), nodes=2, max_attempts=1)
    wait_until(lambda: marker.exists() and marker.read_text(), timeout=120, what="rank 1 looping")
    killed_at = time.time()
    os.kill(int(marker.read_text()), signal.SIGKILL)
    row = plane.invocation(job, wait_s=60)
    assert row.terminal and row.state == "failed", row
    ends = [
        wait_until(lambda p=p: _ended_at(p, job), timeout=30, what="a part's end") for p in procs
    ]
    assert max(ends) - killed_at < 10, ends  # not gloo's 30-minute timeout


def test_a_failed_part_stops_the_others_through_the_plane(two_daemons, tmp_path: Path) -> None:
    """Rank 0 waits outside any collective, where gloo would never notice its peer is gone:
    the plane's word that the gang ended is what stops it."""
    from tests.e2e import gang_jobs

    plane, procs = two_daemons
    q = dls.SyncQueue("gang", dispatch=plane)
    marker = tmp_path / "rank0.pid"
    job = q.submit(dls.thunk(gang_jobs.one_fails_one_waits, str(marker)), nodes=2, max_attempts=1)
    row = plane.invocation(job, wait_s=60)
    assert row.state == "failed" and "rank 1 fails on purpose" in (row.error or ""), row
    stopping = wait_until(
        lambda: next((e for p in procs for e in p.find_all("gang.stopping", invocation=job)), None),
        timeout=10,
        what="rank 0 told to stop",
    )
    assert "rank 1" in stopping["why"]
    pid = int(marker.read_text())
    wait_until(lambda: not pid_alive(pid), timeout=15, what="rank 0's process gone")


def test_lakeshore_exec_nodes_runs_a_command_on_each_part(two_daemons, tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.support.daemons import daemon_env

    plane, _ = two_daemons
    script = "import os, pathlib; pathlib.Path(os.environ['OUT'] + os.environ['RANK']).touch()"
    env = daemon_env(tmp_path / "home")
    lakeshore = str(Path(sys.executable).parent / "lakeshore")
    out = str(tmp_path / "rank-")
    argv = ("python", "-c", script)
    done = subprocess.run(
        [lakeshore, "exec", "--nodes", "2", "-q", "gang", "--env", f"OUT={out}", "--", *argv],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    row = plane.invocation(done.stdout.strip(), wait_s=60)
    assert row.state == "succeeded", row
    # the row succeeds at rank 0's ack (store/gangs.py): rank 1 may end a moment later
    wait_until(
        lambda: sorted(p.name for p in tmp_path.glob("rank-*")) == ["rank-0", "rank-1"],
        timeout=30,
        what="each rank's run",
    )
