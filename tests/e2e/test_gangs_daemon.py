"""Multi-node jobs on real daemons (issue 47): a gang's parts start together with torch's
env:// rendezvous, run real torch.distributed on gloo, and stop together."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane import Dispatch
from tests.support.daemons import DaemonProcess, pid_alive, wait_until

pytest.importorskip("torch")

ROOT = str(Path(__file__).resolve().parents[2])


@contextmanager
def _daemons(tmp_path: Path, n: int) -> Iterator[tuple[Dispatch, list[DaemonProcess]]]:
    home = tmp_path / "home"
    args = ["--queue", "gang", "--concurrency", "1", "--advertise-addr", "127.0.0.1"]
    procs = [DaemonProcess(home, f"node-{i}", args, paths=[ROOT]) for i in range(n)]
    try:
        for p in procs:
            p.ready()
        with Dispatch(str(home / "lakeshore.db")) as plane:
            yield plane, procs
    finally:
        for p in procs:
            p.stop()


@pytest.fixture
def two_daemons(tmp_path: Path) -> Iterator[tuple[Dispatch, list[DaemonProcess]]]:
    with _daemons(tmp_path, 2) as both:
        yield both


@pytest.fixture
def three_daemons(tmp_path: Path) -> Iterator[tuple[Dispatch, list[DaemonProcess]]]:
    with _daemons(tmp_path, 3) as all_three:
        yield all_three


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


def _ended_at(proc: DaemonProcess, job: str, attempt: int | None = None) -> float | None:
    """When `proc` logged the end of its part of `job` (of `attempt`, when given)."""
    for e in proc.events():
        if attempt is not None and e.get("attempt") != attempt:
            continue
        if e.get("invocation") == job and e.get("event") in ENDS:
            return datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00")).timestamp()
    return None


ENDS = (
    "job.succeeded",
    "job.failed",
    "job.died",
    "job.lost",
    "job.killed",
    "job.abandoned",
    "job.settle_refused",  # its end came after another part's had ended the attempt
)


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


def test_a_part_killed_mid_training_runs_again_as_a_new_gang_from_its_checkpoint(
    two_daemons, tmp_path: Path
) -> None:
    """kill -9 of rank 1's process: the attempt fails as a whole (charged), and the retry, two
    new parts, resumes from rank 0's last checkpoint to the weights of an uninterrupted run."""
    from tests.e2e import gang_jobs

    plane, procs = two_daemons
    q = dls.SyncQueue("gang", dispatch=plane)
    job = q.submit(dls.thunk(gang_jobs.ddp_resumable, 50, str(tmp_path), wait_at=25), nodes=2)
    marker = tmp_path / "rank1.pid"
    wait_until(lambda: marker.exists() and marker.read_text(), timeout=120, what="rank 1 at 25")
    os.kill(int(marker.read_text()), signal.SIGKILL)
    weights = q.result(job, timeout=180)
    assert weights == pytest.approx(gang_jobs.single_train(50), rel=1e-5, abs=1e-6)
    row = plane.invocation(job)
    assert (row.state, row.attempt, row.preemptions) == ("succeeded", 2, 0), row
    starts = [e for p in procs for e in p.find_all("gang.started", invocation=job)]
    assert sorted((e["attempt"], e["rank"]) for e in starts) == [(1, 0), (1, 1), (2, 0), (2, 1)]


def test_one_daemon_preempted_gives_every_part_the_notice_and_the_retry_is_not_charged(
    three_daemons, tmp_path: Path
) -> None:
    """`lakeshore daemon drain --preempt` of rank 1's daemon: rank 0, on a box that is not
    going away, hears the notice through the plane, checkpoints, and the gang runs again on
    the two other daemons from that checkpoint, with max_attempts=1 (a preemption is free)."""
    from tests.e2e import gang_jobs

    plane, procs = three_daemons
    q = dls.SyncQueue("gang", dispatch=plane)
    train = dls.thunk(gang_jobs.ddp_resumable, 200, str(tmp_path), pause_s=0.05)
    job = q.submit(train, nodes=2, max_attempts=1)
    wait_until(lambda: (tmp_path / "rank0.step30").exists(), timeout=120, what="step 30")
    rank1 = next(p for p in procs if p.find("gang.started", invocation=job, rank=1))
    plane.set_worker_state(rank1.name, "preempting")
    weights = q.result(job, timeout=240)
    assert (tmp_path / "rank0.noticed").exists(), "rank 0 was never told of the notice"
    assert weights == pytest.approx(gang_jobs.single_train(200), rel=1e-5, abs=1e-6)
    row = plane.invocation(job)
    assert (row.state, row.preemptions) == ("succeeded", 1), row
    retried = [p.name for p in procs if p.find("gang.started", invocation=job, attempt=2)]
    assert len(retried) == 2 and rank1.name not in retried


def test_a_part_whose_daemon_is_killed_runs_again_elsewhere_from_its_checkpoint(
    three_daemons, tmp_path: Path
) -> None:
    """kill -9 of rank 1's daemon (its child dies with it): the attempt ends, and the gang runs
    again on the two daemons left, from rank 0's checkpoint, to an uninterrupted run's weights.
    (The survivor's gloo error ends the attempt first, within a second, and counts as that
    part's failure: the plane cannot tell it from a bug. Had it waited outside a collective,
    the dead part's lease would have ended it.)"""
    from tests.e2e import gang_jobs

    plane, procs = three_daemons
    q = dls.SyncQueue("gang", dispatch=plane)
    job = q.submit(dls.thunk(gang_jobs.ddp_resumable, 200, str(tmp_path), pause_s=0.05), nodes=2)
    wait_until(lambda: (tmp_path / "rank0.step30").exists(), timeout=120, what="step 30")
    rank1 = next(p for p in procs if p.find("gang.started", invocation=job, rank=1))
    rank1.kill9()
    weights = q.result(job, timeout=240)
    assert weights == pytest.approx(gang_jobs.single_train(200), rel=1e-5, abs=1e-6)
    assert plane.invocation(job).attempt == 2
    retried = [p.name for p in procs if p.find("gang.started", invocation=job, attempt=2)]
    assert len(retried) == 2 and rank1.name not in retried


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
    """Each part runs the command and keeps its own output: `jobs logs --rank N` prints that
    part's lines, and the job ends once every part has."""
    import subprocess
    import sys

    from tests.support.daemons import daemon_env

    plane, _ = two_daemons
    script = (
        "import os, pathlib; pathlib.Path(os.environ['OUT'] + os.environ['RANK']).touch(); "
        "print('hello from rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])"
    )
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
    job = done.stdout.strip()
    row = plane.invocation(job, wait_s=60)
    assert row.state == "succeeded", row
    # The row succeeds once every part has acked: both have run by now.
    assert sorted(p.name for p in tmp_path.glob("rank-*")) == ["rank-0", "rank-1"]

    def logs(*extra: str) -> str:
        cmd = [lakeshore, "jobs", "logs", job, *extra]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout

    assert logs().splitlines() == ["hello from rank 0 of 2"]
    assert logs("--rank", "1").splitlines() == ["hello from rank 1 of 2"]
    assert logs("--rank", "1", "--follow").splitlines() == ["hello from rank 1 of 2"]
    q = dls.SyncQueue("gang", dispatch=plane)
    assert list(q.stream(job, rank=1)) == ["hello from rank 1 of 2"]
    bad = subprocess.run(
        [lakeshore, "jobs", "logs", job, "--rank", "-1"], env=env, capture_output=True, text=True
    )
    assert bad.returncode == 2 and "--rank" in bad.stderr


def test_a_gang_two_daemons_cannot_complete_never_starts_and_they_keep_working(
    two_daemons, tmp_path: Path
) -> None:
    from tests.e2e import gang_jobs

    plane, procs = two_daemons
    q = dls.SyncQueue("gang", dispatch=plane)
    gang = q.submit(dls.thunk(gang_jobs.started_at, str(tmp_path)), nodes=3)
    singles = [q.submit(dls.thunk(gang_jobs.started_at, str(tmp_path))) for _ in range(4)]
    for job in singles:
        q.result(job, timeout=60)
    row = plane.invocation(gang)
    assert row.state == "queued" and row.pending_reason == "unschedulable", row
    assert "gang of 3 parts" in (row.unschedulable_reason or "")
    assert not any(p.find("gang.started", invocation=gang) for p in procs)
    assert not list(tmp_path.glob("0-*")), "a part of the gang ran"


def test_a_gang_is_held_until_its_last_part_frees_up_and_later_jobs_wait_for_it(
    three_daemons, tmp_path: Path
) -> None:
    """One daemon busy with a long job, then a 3-node job, then 1-node jobs: the two free
    daemons hold parts (and take nothing else) until the third frees up; no part starts before
    all three are held, and no later job starts before the gang."""
    from tests.e2e import gang_jobs

    plane, _ = three_daemons
    q = dls.SyncQueue("gang", dispatch=plane)
    starts_in = tmp_path / "starts"
    starts_in.mkdir()
    first = q.submit(dls.thunk(gang_jobs.started_at, str(starts_in), 3.0))
    wait_until(lambda: plane.invocation(first).state == "running", timeout=30, what="first")
    gang = q.submit(dls.thunk(gang_jobs.started_at, str(starts_in)), nodes=3)
    later = [q.submit(dls.thunk(gang_jobs.started_at, str(starts_in))) for _ in range(3)]
    for job in later:
        q.result(job, timeout=90)
    assert q.result(gang, timeout=90) > 0
    done_first = plane.invocation(first)
    starts = {p.name: float(p.read_text()) for p in starts_in.iterdir()}
    parts = [t for name, t in starts.items() if name[0] in "012"]
    singles = [t for name, t in starts.items() if name.startswith("single")]
    assert len(parts) == 3 and len(singles) == 4, sorted(starts.items(), key=lambda kv: kv[1])
    assert done_first.finished_at is not None and min(parts) >= done_first.finished_at - 0.05
    assert max(parts) - min(parts) < 1.0  # started together
    assert sorted(singles)[1:] >= [min(parts)] * 3  # the later ones waited for the gang


def test_two_gangs_sharing_two_hosts_get_different_master_ports(tmp_path: Path) -> None:
    from tests.e2e import gang_jobs

    home = tmp_path / "home"
    args = ["--queue", "gang", "--concurrency", "2", "--advertise-addr", "127.0.0.1"]
    procs = [DaemonProcess(home, f"host-{i}", args, paths=[ROOT]) for i in range(2)]
    try:
        for p in procs:
            p.ready()
        with Dispatch(str(home / "lakeshore.db")) as plane:
            q = dls.SyncQueue("gang", dispatch=plane)
            jobs = [q.submit(dls.thunk(gang_jobs.port_held, 3.0), nodes=2) for _ in range(2)]
            ports = [q.result(job, timeout=120) for job in jobs]
            rows = [plane.invocation(job) for job in jobs]
    finally:
        for p in procs:
            p.stop()
    assert ports[0] != ports[1], ports
    spans = [(r.started_at or 0.0, r.finished_at or 0.0) for r in rows]
    assert max(s for s, _ in spans) < min(f for _, f in spans), "the two gangs did not overlap"


def test_a_stopped_part_is_a_hang_both_parts_stacks_are_kept_and_the_retry_finishes(
    two_daemons, tmp_path: Path
) -> None:
    """SIGSTOP of rank 1's process with hang_timeout_s=5: within 15 s the gang is found hung,
    each part's Python stacks are in its own output, and the retry resumes to the end."""
    from tests.e2e import gang_jobs

    plane, procs = two_daemons
    q = dls.SyncQueue("gang", dispatch=plane)
    train = dls.thunk(gang_jobs.ddp_resumable, 200, str(tmp_path), mark_at=30, pause_s=0.02)
    job = q.submit(train, nodes=2, hang_timeout_s=5)
    marker = tmp_path / "rank1.pid"
    wait_until(lambda: marker.exists() and marker.read_text(), timeout=120, what="rank 1 at 30")
    os.kill(int(marker.read_text()), signal.SIGSTOP)
    stopped_at = time.time()
    hung = wait_until(
        lambda: next((e for p in procs for e in p.find_all("gang.hung", invocation=job)), None),
        timeout=30,
        what="the hang found",
    )
    ended = [
        wait_until(lambda p=p: _ended_at(p, job, 1), timeout=30, what="a part's end") for p in procs
    ]
    assert max(ended) - stopped_at < 15, (hung, ended)
    weights = q.result(job, timeout=180)
    assert weights == pytest.approx(gang_jobs.single_train(200), rel=1e-5, abs=1e-6)
    row = plane.invocation(job)
    assert row.state == "succeeded" and row.attempt == 2, row
    for rank in (0, 1):
        out = "".join(str(v) for v in q.stream(job, rank=rank))
        assert f"--- Python stacks of rank {rank} ---" in out, (rank, out[:500])
        assert "ddp_resumable" in out  # the job's own frames are in the dump
