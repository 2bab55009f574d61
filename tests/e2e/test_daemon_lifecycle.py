"""Daemon lifecycles with real processes: membership, drains, signals, kill -9, systemd notify."""

from __future__ import annotations

import secrets
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import jobs
import pytest
from click.testing import CliRunner
from daemon_harness import DaemonProcess, pid_alive, wait_until

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.cli.main import cli
from dreamlake.lakeshore.plane import Dispatch
from tests.support.server import free_port

pytestmark = pytest.mark.slow


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[Dispatch]:
    with Dispatch(tmp_path / "lakeshore.db") as plane:
        yield plane


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[list[DaemonProcess]]:
    """Start daemons through `started.append(DaemonProcess(...))`; all stopped at the end."""
    started: list[DaemonProcess] = []
    yield started
    for proc in started:
        proc.stop()


def start(
    daemons: list[DaemonProcess], home: Path, name: str, *args: str, **kw: object
) -> DaemonProcess:
    proc = DaemonProcess(home, name, list(args), **kw)  # type: ignore[arg-type]
    daemons.append(proc)
    return proc.ready()


def lakeshore(home: Path, *args: str) -> str:
    result = CliRunner().invoke(
        cli, list(args), env={"LAKESHORE_HOME": str(home), "LAKESHORE_URL": ""}
    )
    assert result.exit_code == 0, result.output
    return result.output


def test_membership_changes_without_a_restart_and_drain_from_the_cli(
    tmp_path: Path, plane: Dispatch, daemons: list[DaemonProcess]
) -> None:
    proc = start(daemons, tmp_path, "member", "--queue", "train")
    train = dls.SyncQueue("train", dispatch=plane)
    evals = dls.SyncQueue("eval", dispatch=plane)

    # given a daemon on `train`, a job on `eval` waits while one on `train` runs
    waiting = evals.submit(dls.thunk(jobs.square, 5))
    assert train.result(train.submit(dls.thunk(jobs.square, 2)), timeout=20) == 4
    assert evals.status(waiting).state == "queued"

    # when `eval` is added from the CLI, the running daemon serves it
    assert "train,eval" in lakeshore(tmp_path, "daemon", "update", "member", "--add-queue", "eval")
    assert evals.result(waiting, timeout=20) == 25
    proc.wait_for("worker.membership_changed", queues=["train", "eval"])

    # when `train` is removed, an older `train` job is left while a newer `eval` job runs
    lakeshore(tmp_path, "daemon", "update", "member", "--remove-queue", "train")
    proc.wait_for("worker.membership_changed", queues=["eval"])
    left = train.submit(dls.thunk(jobs.square, 3))
    assert evals.result(evals.submit(dls.thunk(jobs.square, 6)), timeout=20) == 36
    assert train.status(left).state == "queued"

    # removing its last queue needs --force, and then it idles rather than serve `default`
    refused = CliRunner().invoke(
        cli,
        ["daemon", "update", "member", "--remove-queue", "eval"],
        env={"LAKESHORE_HOME": str(tmp_path), "LAKESHORE_URL": ""},
    )
    assert refused.exit_code == 2 and "last queue" in refused.output
    lakeshore(tmp_path, "daemon", "update", "member", "--remove-queue", "eval", "--force")
    proc.wait_for("worker.membership_changed", queues=["(none: idle)"])

    # `daemon drain` reaches it at its next heartbeat: it exits 0 and its row is gone
    lakeshore(tmp_path, "daemon", "drain", "member")
    assert proc.wait(timeout=30) == 0
    assert plane.worker(proc.find("worker.ready")["worker_id"]).state == "gone"  # type: ignore[index]
    assert "member" not in lakeshore(tmp_path, "daemon", "list")


def test_handler_gets_plain_payloads_and_burst_exits_when_empty(
    tmp_path: Path, plane: Dispatch, daemons: list[DaemonProcess]
) -> None:
    q = dls.SyncQueue("raw", dispatch=plane)
    single = q.submit({"x": 1})
    streamed = q.submit(["a", "b"])
    proc = DaemonProcess(
        tmp_path, "burst", ["-q", "raw", "--handler", "jobs:handle", "--burst", "-c", "2"]
    )
    daemons.append(proc)
    assert proc.wait(timeout=60) == 0
    assert q.result(single, timeout=1) == {"handled": {"x": 1}}
    assert q.result(streamed, timeout=1) == 2
    assert list(q.stream(streamed, timeout=1)) == ["a", "b"]
    assert proc.find("worker.stopped") is not None


def test_a_burst_daemon_that_cannot_reach_its_plane_says_so_and_exits_3(
    tmp_path: Path, daemons: list[DaemonProcess]
) -> None:
    # Given a burst daemon pointed at a port nothing listens on, with a short bound
    url = f"http://127.0.0.1:{free_port()}"
    bound = ["--url", url, "--token", "lks_nobody", "-q", "q", "--burst"]
    proc = DaemonProcess(tmp_path, "lost", [*bound, "--give-up-unreachable-s", "3"])
    daemons.append(proc)

    # Then it says what it retries and for how long, gives up at the bound, and exits 3
    assert proc.wait(timeout=60) == 3
    first = proc.find("plane.unreachable", call="register")
    assert first is not None and f"cannot reach the control plane at {url}" in first["error"]
    assert first["then"] == "retrying for 3 s more, then giving up"
    gave_up = proc.find("worker.plane_unreachable")
    assert gave_up is not None and gave_up["error"].startswith("gave up after 3 s without")


def test_a_burst_daemon_waits_30_s_for_its_plane_by_default(
    tmp_path: Path, daemons: list[DaemonProcess]
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    proc = DaemonProcess(tmp_path, "lost", ["--url", url, "--token", "lks_x", "--burst"])
    daemons.append(proc)
    first = proc.wait_for("plane.unreachable", call="register")
    assert first["then"] == "retrying for 30 s more, then giving up"
    proc.signal(signal.SIGTERM)  # asked to stop before it could register: a clean exit
    assert proc.wait(timeout=30) == 0


def test_a_handler_that_does_not_import_stops_the_daemon_at_start(
    tmp_path: Path, daemons: list[DaemonProcess]
) -> None:
    proc = DaemonProcess(tmp_path, "bad-handler", ["--handler", "jobs:no_such_function"])
    daemons.append(proc)
    assert proc.wait(timeout=60) == 2
    failed = proc.find("worker.slot_start_failed")
    assert failed is not None and "no_such_function" in failed["error"]


class NotifySocket:
    """A real datagram socket standing in for systemd's notify socket (abstract address)."""

    def __init__(self) -> None:
        self.name = f"lakeshore-test-{secrets.token_hex(6)}"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + self.name)
        self.messages: list[dict[str, str]] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(4096)
            except OSError:
                return
            if not data:
                return
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
            self.messages.append(fields)

    def seen(self, key: str) -> list[dict[str, str]]:
        return [m for m in list(self.messages) if key in m]

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(5)


def test_sigterm_drains_a_running_job_to_completion_and_talks_to_systemd(
    tmp_path: Path, plane: Dispatch, daemons: list[DaemonProcess]
) -> None:
    notify = NotifySocket()
    try:
        proc = DaemonProcess(
            tmp_path,
            "notified",
            ["-q", "drain", "--drain-timeout-s", "60"],
            env={"NOTIFY_SOCKET": "@" + notify.name, "WATCHDOG_USEC": "400000"},
        )
        daemons.append(proc)
        proc.ready()
        wait_until(lambda: notify.seen("READY"), what="READY=1")
        wait_until(lambda: notify.seen("WATCHDOG"), what="WATCHDOG=1")
        q = dls.SyncQueue("drain", dispatch=plane)
        marker = tmp_path / "drain.pid"
        inv = q.submit(dls.thunk(jobs.sleep_for, 1.5, str(marker)))
        wait_until(marker.exists, what="the job to start")

        proc.signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert q.result(inv, timeout=1) == "slept"  # finished, not released
        assert proc.find("job.succeeded", invocation=inv) is not None

        ready = notify.seen("READY")[0]
        assert ready["READY"] == "1" and ready["MAINPID"] == str(proc.pid)
        assert "0/1 slots busy" in ready["STATUS"]
        stopping = notify.seen("STOPPING")
        assert stopping and "draining" in stopping[0]["STATUS"]
        assert notify.seen("EXTEND_TIMEOUT_USEC")
        assert plane.worker(proc.find("worker.ready")["worker_id"]).state == "gone"  # type: ignore[index]
    finally:
        notify.close()


def test_drain_timeout_releases_the_job_and_another_daemon_completes_it(
    tmp_path: Path, plane: Dispatch, daemons: list[DaemonProcess]
) -> None:
    q = dls.SyncQueue("handover", dispatch=plane)
    first = start(
        daemons,
        tmp_path,
        "first",
        "-q",
        "handover",
        "--drain-timeout-s",
        "0.5",
        "--kill-grace-s",
        "0.5",
    )
    marker = tmp_path / "handover.pid"
    inv = q.submit(dls.thunk(jobs.once_then_fast, str(marker), 600))
    child = int(wait_until(lambda: marker.exists() and marker.read_text(), what="first attempt"))

    first.signal(signal.SIGTERM)  # a preemption notice (issue 35)
    assert first.wait(timeout=30) == 0
    assert first.find("job.preempted", invocation=inv, cause="notice") is not None
    assert not pid_alive(child)
    assert q.status(inv).state == "queued"  # back in the queue at once, not after a lease

    start(daemons, tmp_path, "second", "-q", "handover")
    assert q.result(inv, timeout=30) == "second run"
    row = q.status(inv)  # a preemption does not spend an attempt: it counts apart
    assert (row.attempt, row.preemptions, row.max_attempts) == (2, 1, 3)


def test_a_second_signal_stops_at_once(
    tmp_path: Path, plane: Dispatch, daemons: list[DaemonProcess]
) -> None:
    q = dls.SyncQueue("urgent", dispatch=plane)
    proc = start(daemons, tmp_path, "urgent", "-q", "urgent", "--drain-timeout-s", "600")
    marker = tmp_path / "urgent.pid"
    inv = q.submit(dls.thunk(jobs.sleep_for, 600, str(marker)))
    wait_until(marker.exists, what="the job to start")
    proc.signal(signal.SIGTERM)
    proc.wait_for("worker.draining")
    proc.signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0
    assert q.status(inv).state == "queued"
    assert not pid_alive(int(marker.read_text()))


def test_kill_9_of_the_daemon_redispatches_after_the_lease(
    tmp_path: Path, plane: Dispatch, daemons: list[DaemonProcess]
) -> None:
    q = dls.SyncQueue("crash", dispatch=plane)
    doomed = start(daemons, tmp_path, "doomed", "-q", "crash", "--lease-s", "2")
    marker = tmp_path / "crash.pid"
    inv = q.submit(dls.thunk(jobs.once_then_fast, str(marker), 600))
    child = int(wait_until(lambda: marker.exists() and marker.read_text(), what="first attempt"))

    doomed.signal(signal.SIGKILL)
    doomed.wait(timeout=10)
    wait_until(lambda: not pid_alive(child), what="the orphaned child to die with its daemon")

    start(daemons, tmp_path, "heir", "-q", "crash", "--lease-s", "2")
    assert q.result(inv, timeout=30) == "second run"
    assert q.status(inv).attempt == 2


def test_a_daemon_cut_off_past_its_lease_has_its_late_settle_refused(
    tmp_path: Path, plane: Dispatch, daemons: list[DaemonProcess]
) -> None:
    q = dls.SyncQueue("stale", dispatch=plane)
    stale = start(daemons, tmp_path, "stale", "-q", "stale", "--lease-s", "1")
    marker = tmp_path / "stale.pid"
    inv = q.submit(dls.thunk(jobs.once_then_fast, str(marker), 2.5))
    wait_until(marker.exists, what="first attempt")

    # the daemon freezes (its child runs on); its lease runs out and another daemon takes over
    stale.signal(signal.SIGSTOP)
    try:
        start(daemons, tmp_path, "fresh", "-q", "stale", "--lease-s", "1")
        assert q.result(inv, timeout=30) == "second run"
    finally:
        stale.signal(signal.SIGCONT)

    # the first attempt's outcome arrives late: refused and dropped, the daemon lives on
    wait_until(
        lambda: (
            stale.find("job.settle_refused", invocation=inv)
            or stale.find("job.abandoned", invocation=inv)
        ),
        what="the late outcome to be dropped",
    )
    assert q.status(inv).attempt == 2 and q.result(inv, timeout=1) == "second run"
    assert stale.proc.poll() is None
    more = [q.submit(dls.thunk(jobs.square, n)) for n in range(4)]
    assert [q.result(i, timeout=30) for i in more] == [0, 1, 4, 9]
