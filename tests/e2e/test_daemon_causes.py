"""What ends a job on a real daemon, recorded as its cause (issues 34 and 35): out of host memory
apart from any other death; over its GPU memory share; on a GPU that failed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import jobs
import pytest
from click.testing import CliRunner
from daemon_harness import DaemonProcess, wait_until

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.cli.main import cli
from dreamlake.lakeshore.plane import Dispatch

pytestmark = pytest.mark.slow

QUEUE = "causes"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lakeshore")


@pytest.fixture(scope="module")
def oom_counter(home: Path) -> Path:
    """The daemon's OOM-kill counter (daemon/oom.py's seam): the real ones move only when the
    kernel kills for memory, which a test on a shared box must not set off."""
    counter = home / "oom_kill"
    counter.write_text("0")
    return counter


@pytest.fixture(scope="module")
def plane(home: Path) -> Iterator[Dispatch]:
    with Dispatch(home / "lakeshore.db") as plane:
        yield plane


@pytest.fixture(scope="module")
def daemon(home: Path, plane: Dispatch, oom_counter: Path) -> Iterator[DaemonProcess]:
    env = {"LAKESHORE_OOM_COUNTERS": str(oom_counter)}
    proc = DaemonProcess(home, "causes-1", ["--queue", QUEUE, "--concurrency", "2"], env=env)
    try:
        yield proc.ready()
    finally:
        proc.stop()


@pytest.fixture
def q(plane: Dispatch, daemon: DaemonProcess) -> dls.SyncQueue:
    return dls.SyncQueue(QUEUE, dispatch=plane)


def test_a_memory_error_under_an_rlimit_is_out_of_host_memory(q: dls.SyncQueue) -> None:
    inv = q.submit(dls.thunk(jobs.allocate_past_rlimit), max_attempts=3)
    with pytest.raises(dls.DispatchError, match="ran out of host memory"):
        q.result(inv, timeout=30)

    row = q.status(inv)
    assert (row.state, row.ended_by, row.attempt) == ("failed", "oom", 1)  # not retried
    assert row.error is not None and "MemoryError" in row.error
    assert q.result(q.submit(dls.thunk(jobs.square, 4)), timeout=30) == 16  # the slot goes on


def test_a_sigkill_while_the_oom_counter_moved_is_out_of_host_memory(
    q: dls.SyncQueue, oom_counter: Path
) -> None:
    inv = q.submit(dls.thunk(jobs.sigkill_self, str(oom_counter)))
    with pytest.raises(dls.DispatchError, match="ran out of host memory"):
        q.result(inv, timeout=30)

    row = q.status(inv)
    assert (row.state, row.ended_by) == ("failed", "oom")
    assert row.error is not None and "OOM killer" in row.error


def test_a_sigkill_with_no_oom_kill_counted_is_a_death(q: dls.SyncQueue) -> None:
    inv = q.submit(dls.thunk(jobs.sigkill_self))
    with pytest.raises(dls.DispatchError, match="not by the OOM killer"):
        q.result(inv, timeout=30)
    assert (q.status(inv).state, q.status(inv).ended_by) == ("failed", "died")


# -- GPUs (issue 34 item 6), through the GPU state seam (daemon/gpuwatch.py) ------------------


def _gpu_daemon(home: Path, name: str, state: Path, *extra: str) -> DaemonProcess:
    args = ["--queue", f"{name}-q", "--gpus", "2", "--gpu-type", "H100", "--gpu-memory-gb", "80"]
    env = {"LAKESHORE_GPU_STATE": str(state), "LAKESHORE_GPU_POLL_S": "0.1"}
    return DaemonProcess(home, name, [*args, *extra], env=env).ready()


def _pids(folder: Path, name: str) -> dict[str, int]:
    path = folder / f"{name}.json"
    found = wait_until(lambda: path.exists() and path.read_text(), what=f"{name} to start")
    return dict(json.loads(found))


def test_a_job_over_its_gpu_memory_share_ends_and_its_neighbour_runs_on(
    home: Path, plane: Dispatch, tmp_path: Path
) -> None:
    state = tmp_path / "gpus.json"
    daemon = _gpu_daemon(home, "gpu-mem", state, "--enforce-gpu-memory")
    try:
        q = dls.SyncQueue("gpu-mem-q", dispatch=plane)
        half = {"gpus": 0.5}
        greedy = q.submit(dls.thunk(jobs.hold_gpu, str(tmp_path), "greedy"), resources=half)
        modest = q.submit(dls.thunk(jobs.hold_gpu, str(tmp_path), "modest"), resources=half)
        greedy_pids, modest_pids = _pids(tmp_path, "greedy"), _pids(tmp_path, "modest")
        gpu = q.status(greedy).placement["gpus"][0]["index"]  # type: ignore[index]
        assert q.status(modest).placement["gpus"][0]["index"] == gpu  # type: ignore[index]
        # 60 GB on a 0.5 x 80 GB share, by the job's grandchild; its neighbour within its own.
        procs = [
            {"pid": greedy_pids["child"], "used_mb": 60 * 1024},
            {"pid": modest_pids["pid"], "used_mb": 30 * 1024},
        ]
        state.write_text(json.dumps({"processes": {str(gpu): procs}}))

        with pytest.raises(dls.DispatchError, match=r"used 60\.0 GB of GPU \d's memory"):
            q.result(greedy, timeout=30)
        row = q.status(greedy)
        assert (row.state, row.ended_by) == ("failed", "gpu_memory")
        assert row.error is not None and "more than its share of 40.0 GB" in row.error
        assert q.status(modest).state == "running"

        (tmp_path / "release").touch()
        assert q.result(modest, timeout=30)["attempt"] == 1
        assert daemon.proc.poll() is None
    finally:
        daemon.stop()


def test_a_failed_gpu_leaves_the_offer_and_its_job_runs_again_uncharged(
    home: Path, plane: Dispatch, tmp_path: Path
) -> None:
    state = tmp_path / "gpus.json"
    daemon = _gpu_daemon(home, "gpu-fail", state)
    try:
        q = dls.SyncQueue("gpu-fail-q", dispatch=plane)
        inv = q.submit(
            dls.thunk(jobs.hold_gpu, str(tmp_path), "victim"),
            resources={"gpus": 1},
            max_attempts=1,
        )
        _pids(tmp_path, "victim")
        bad = q.status(inv).placement["gpus"][0]["index"]  # type: ignore[index]

        state.write_text(json.dumps({"failed": {str(bad): "Xid 79"}}))

        seen = q.result(inv, timeout=30)
        row = q.status(inv)
        assert (row.attempt, row.preemptions, row.ended_by) == (2, 1, "gpu_failed")
        assert seen["cuda"] != str(bad)  # it ran again on the GPU left
        worker = wait_until(
            lambda: (w := plane.worker("gpu-fail")).load.get("gpus_failed") and w,
            what="the heartbeat to show the failed GPU",
        )
        assert [(g["index"], g["reason"]) for g in worker.load["gpus_failed"]] == [(bad, "Xid 79")]
        assert worker.load["gpu_use"]["failed"] == 1

        env = {"LAKESHORE_HOME": str(home), "LAKESHORE_URL": ""}
        listed = CliRunner().invoke(cli, ["daemon", "ls", "--wide"], env=env)  # failed-gpus
        assert listed.exit_code == 0, listed.output
        line = next(ln for ln in listed.output.splitlines() if ln.startswith("gpu-fail "))
        assert f"{bad} (Xid 79)" in line
        # Out of the offer: a second whole-GPU job and the one GPU left are all it has.
        two = q.submit(dls.thunk(jobs.placed), resources={"gpus": 2})
        one = q.submit(dls.thunk(jobs.placed), resources={"gpus": 1})
        assert q.result(one, timeout=30)["cuda"] != str(bad)
        assert q.status(two).state == "queued"
        q.cancel(two)
    finally:
        daemon.stop()
