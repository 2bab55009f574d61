"""A real `lakeshore-daemon` against the embedded plane: bodies, exec, kill, timeout, crashes.

One daemon (two slots, each pinned to one of two fake GPUs) serves this whole module; tests that
kill or crash a slot's child then check that the slot recovers, which is part of what they test.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import jobs
import pytest
from click.testing import CliRunner
from daemon_harness import DaemonProcess, fake_nvidia_smi, pid_alive, wait_until

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.cli.main import cli
from dreamlake.lakeshore.plane import Dispatch

pytestmark = pytest.mark.slow

QUEUE = "box"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lakeshore")


@pytest.fixture(scope="module")
def plane(home: Path) -> Iterator[Dispatch]:
    with Dispatch(home / "lakeshore.db") as plane:
        yield plane


@pytest.fixture(scope="module")
def daemon(home: Path, plane: Dispatch) -> Iterator[DaemonProcess]:
    bin_dir = fake_nvidia_smi(home / "bin", 2)
    proc = DaemonProcess(
        home,
        "box-1",
        [
            "--queue",
            QUEUE,
            "--concurrency",
            "2",
            "--gpus-per-job",
            "1",
            "--lease-s",
            "3",
            "--kill-grace-s",
            "0.5",
            "--label",
            "zone=test",
        ],
        env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
    )
    try:
        yield proc.ready()
    finally:
        proc.stop()


@pytest.fixture
def q(plane: Dispatch, daemon: DaemonProcess) -> dls.SyncQueue:
    return dls.SyncQueue(QUEUE, dispatch=plane)


def test_sync_body_returns_its_result(q: dls.SyncQueue) -> None:
    inv = q.submit(dls.thunk(jobs.square, 7))
    assert q.result(inv, timeout=20) == 49


def test_a_ref_passes_through_a_daemon_and_back_without_its_bytes(q: dls.SyncQueue) -> None:
    import numpy as np

    ref = dls.put(np.arange(1 << 20, dtype=np.float32), durable=False)  # 4 MiB on this box
    inv = q.submit(dls.thunk(jobs.double_ref, ref))

    out = q.result(inv, timeout=20)

    assert isinstance(out, dls.Ref) and out.size == ref.size
    assert len(q.status(inv).result or b"") < 300  # the row holds the Ref, not the array
    assert np.array_equal(dls.get(out), np.arange(1 << 20, dtype=np.float32) * 2)


def test_a_payload_too_big_to_hand_to_the_child_at_assignment_still_runs(
    q: dls.SyncQueue,
) -> None:
    from dreamlake.lakeshore.daemon.slots import HAND_MAX_BYTES

    big = b"x" * (HAND_MAX_BYTES * 3)  # inline (no spill), but sent by the slot thread
    small = [q.submit(dls.thunk(jobs.size_of, b"y")) for _ in range(3)]
    inv = q.submit(dls.thunk(jobs.size_of, big))

    assert q.result(inv, timeout=20) == len(big)
    assert [q.result(i, timeout=20) for i in small] == [1, 1, 1]


def test_dls_run_names_the_job_its_attempt_and_its_queue(q: dls.SyncQueue) -> None:
    inv = q.submit(dls.thunk(jobs.where_am_i))
    assert q.result(inv, timeout=20) == {"id": inv, "attempt": 1, "queue": QUEUE}


def test_generator_yields_frames_and_returns_the_result(q: dls.SyncQueue) -> None:
    inv = q.submit(dls.thunk(jobs.count_up, 4))
    assert q.result(inv, timeout=20) == 4
    assert list(q.stream(inv, timeout=5)) == [0, 1, 2, 3]


def test_async_body_returns_its_result(q: dls.SyncQueue) -> None:
    inv = q.submit(dls.thunk(jobs.async_add, 2, 3))
    assert q.result(inv, timeout=20) == 5


def test_async_generator_streams(q: dls.SyncQueue) -> None:
    inv = q.submit(dls.thunk(jobs.async_ticks, 3))
    assert list(q.stream(inv, timeout=20)) == ["tick-0", "tick-1", "tick-2"]
    assert q.status(inv).state == "succeeded"


def test_udf_envelope_runs(q: dls.SyncQueue) -> None:
    inv = q.submit(envelope=dls.Envelope.for_udf(jobs.square, (9,)))
    assert q.result(inv, timeout=20) == 81


def test_exception_fails_the_job_with_its_traceback(q: dls.SyncQueue) -> None:
    inv = q.submit(dls.thunk(jobs.boom, "no good"))
    with pytest.raises(dls.DispatchError, match="ValueError: no good"):
        q.result(inv, timeout=20)
    error = q.status(inv).error or ""
    assert "jobs.py" in error  # the user's frames, not ours
    assert "slots.py" not in error and "child.py" not in error


def test_exec_streams_lines_and_succeeds_on_exit_zero(q: dls.SyncQueue) -> None:
    inv = q.submit(envelope=dls.Envelope.for_exec("echo one; echo two >&2; echo three"))
    assert q.result(inv, timeout=20) == 0
    assert list(q.stream(inv, timeout=5)) == ["one", "two", "three"]


def test_exec_nonzero_exit_fails_with_the_tail_of_output(q: dls.SyncQueue) -> None:
    inv = q.submit(envelope=dls.Envelope.for_exec("echo first; echo 'it broke' >&2; exit 4"))
    with pytest.raises(dls.DispatchError, match="exited with 4") as failure:
        q.result(inv, timeout=20)
    assert "it broke" in str(failure.value)
    assert q.status(inv).state == "failed"


def test_each_slot_is_pinned_to_its_own_gpu(q: dls.SyncQueue, home: Path) -> None:
    rendezvous = home / "peers"
    invs = [q.submit(dls.thunk(jobs.wait_for_peers, str(rendezvous), 2)) for _ in range(2)]
    results = [q.result(inv, timeout=30) for inv in invs]
    assert sorted(r["cuda"] for r in results) == ["0", "1"]
    assert len({r["pid"] for r in results}) == 2


def test_worker_row_carries_host_facts_and_load(plane: Dispatch, daemon: DaemonProcess) -> None:
    row = plane.worker("box-1")
    assert row.queues == [QUEUE]
    assert row.pid == daemon.pid
    assert row.info["concurrency"] == 2
    assert row.info["cpus"] >= 1 and row.info["memory_mb"] > 0
    assert [g["index"] for g in row.info["gpus"]] == [0, 1]
    assert row.info["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert row.info["labels"] == {"zone": "test"}
    loaded = wait_until(lambda: plane.worker("box-1").load.get("slots"), what="a heartbeat")
    assert [s["gpus"] for s in loaded] == [[0], [1]]


def test_cli_lists_and_shows_the_daemon(home: Path, daemon: DaemonProcess) -> None:
    env = {"LAKESHORE_HOME": str(home), "LAKESHORE_URL": ""}
    listed = CliRunner().invoke(cli, ["daemon", "list", "--json"], env=env)
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.output)
    assert [r["name"] for r in rows] == ["box-1"]
    shown = CliRunner().invoke(cli, ["daemon", "show", "box-1"], env=env)
    assert shown.exit_code == 0, shown.output
    assert QUEUE in shown.output and "NVIDIA H100" in shown.output


def test_kill_ends_the_attempt_and_a_fresh_child_takes_the_slot(
    q: dls.SyncQueue, home: Path, daemon: DaemonProcess
) -> None:
    marker = home / "kill.pid"
    inv = q.submit(dls.thunk(jobs.sleep_for, 600, str(marker)))
    child = int(wait_until(lambda: marker.exists() and marker.read_text(), what="job start"))
    pushed = len(daemon.find_all("worker.pushed"))
    assert q.cancel(inv, kill=True) is True
    wait_until(lambda: q.status(inv).state == "killed", what="killed")
    # the kill reached the daemon's process at once (kill_watch.py), not at its next renewal
    assert len(daemon.find_all("worker.pushed")) > pushed
    wait_until(lambda: not pid_alive(child), what="the child to be gone")
    with pytest.raises(dls.DispatchError, match="killed"):
        q.result(inv, timeout=1)
    assert q.result(q.submit(dls.thunk(jobs.square, 3)), timeout=20) == 9


def test_kill_escalates_to_sigkill_when_sigterm_is_ignored(q: dls.SyncQueue, home: Path) -> None:
    marker = home / "stubborn.pid"
    inv = q.submit(dls.thunk(jobs.stubborn, str(marker)))
    child = int(wait_until(lambda: marker.exists() and marker.read_text(), what="job start"))
    q.cancel(inv, kill=True)
    wait_until(lambda: q.status(inv).state == "killed", what="killed")
    assert not pid_alive(child)


def test_timeout_ends_the_attempt_as_timeout(q: dls.SyncQueue, home: Path) -> None:
    marker = home / "timeout.pid"
    inv = q.submit(dls.thunk(jobs.sleep_for, 600, str(marker)), timeout_s=1.0)
    wait_until(lambda: q.status(inv).state == "timeout", what="timeout")
    assert "timeout_s" in (q.status(inv).error or "")
    assert not pid_alive(int(marker.read_text()))
    assert q.result(q.submit(dls.thunk(jobs.square, 4)), timeout=20) == 16


def test_exec_kill_takes_the_command_down_too(q: dls.SyncQueue, home: Path) -> None:
    marker = home / "exec.pid"
    inv = q.submit(envelope=dls.Envelope.for_exec(f"echo $$ > {marker}; exec sleep 600"))
    shell = int(wait_until(lambda: marker.exists() and marker.read_text().strip(), what="start"))
    q.cancel(inv, kill=True)
    wait_until(lambda: q.status(inv).state == "killed", what="killed")
    wait_until(lambda: not pid_alive(shell), what="the command to be gone")


def test_a_segfaulting_child_fails_the_job_and_the_slot_recovers(q: dls.SyncQueue) -> None:
    inv = q.submit(dls.thunk(jobs.segfault))
    with pytest.raises(dls.DispatchError, match="SIGSEGV"):
        q.result(inv, timeout=20)
    assert q.status(inv).state == "failed"
    exited = q.submit(dls.thunk(jobs.hard_exit))
    with pytest.raises(dls.DispatchError, match="exited with code 3"):
        q.result(exited, timeout=20)
    assert [q.result(q.submit(dls.thunk(jobs.square, n)), timeout=20) for n in (1, 2)] == [1, 4]


def test_children_stay_warm_between_jobs(q: dls.SyncQueue) -> None:
    pids = {q.result(q.submit(dls.thunk(jobs.pid)), timeout=20) for _ in range(6)}
    assert len(pids) <= 2  # two slots, no process per job


def test_log_lines_name_the_event_and_the_invocation(
    q: dls.SyncQueue, daemon: DaemonProcess
) -> None:
    inv = q.submit(dls.thunk(jobs.square, 2))
    q.result(inv, timeout=20)
    claimed = daemon.wait_for("job.claimed", invocation=inv)
    done = daemon.wait_for("job.succeeded", invocation=inv)
    assert claimed["queue"] == QUEUE and done["worker"] == "box-1"
    assert all("event" in e and "timestamp" in e for e in daemon.events())


def test_lakeshore_exec_submits_and_with_wait_streams_and_mirrors_the_exit(
    home: Path, plane: Dispatch, daemon: DaemonProcess
) -> None:
    env = {"LAKESHORE_HOME": str(home), "LAKESHORE_URL": ""}
    runner = CliRunner()
    submitted = runner.invoke(cli, ["exec", "--queue", QUEUE, "echo detached"], env=env)
    assert submitted.exit_code == 0, submitted.output
    inv = submitted.output.strip()
    assert dls.SyncQueue(QUEUE, dispatch=plane).result(inv, timeout=20) == 0

    ok = runner.invoke(cli, ["exec", "-q", QUEUE, "--wait", "--", "echo", "a b", "c"], env=env)
    assert ok.exit_code == 0 and ok.stdout.splitlines() == ["a b c"]

    failed = runner.invoke(
        cli, ["exec", "-q", QUEUE, "--wait", "echo partial; echo oops >&2; exit 5"], env=env
    )
    assert failed.exit_code == 1
    assert failed.stdout.splitlines() == ["partial", "oops"]
    assert "failed" in failed.stderr and "exited with 5" in failed.stderr
