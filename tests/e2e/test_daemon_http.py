"""The daemon against a real `lakeshore server`: the same jobs over HTTP, with a token."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import jobs
import pytest
from daemon_harness import DaemonProcess, pid_alive, wait_until

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane import HttpDispatch
from tests.support.server import LAUNCH, _stop, _wait_ready, free_port, server_env

pytestmark = pytest.mark.slow


@pytest.fixture
def remote(
    server: object, tenant: object, http_plane: Callable[..., HttpDispatch], tmp_path: Path
) -> Iterator[tuple[HttpDispatch, DaemonProcess]]:
    plane = http_plane(namespace=tenant.namespace, token=tenant.token)  # type: ignore[attr-defined]
    proc = DaemonProcess(
        tmp_path,
        "remote-1",
        ["-q", "gpu", "-c", "2", "--lease-s", "3", "--kill-grace-s", "0.5"],
        env={
            "LAKESHORE_URL": server.url,  # type: ignore[attr-defined]
            "LAKESHORE_TOKEN": tenant.token,  # type: ignore[attr-defined]
            "LAKESHORE_NAMESPACE": tenant.namespace,  # type: ignore[attr-defined]
        },
    )
    try:
        yield plane, proc.ready()
    finally:
        proc.stop()


def test_jobs_frames_exec_and_kill_over_http(
    remote: tuple[HttpDispatch, DaemonProcess], tmp_path: Path
) -> None:
    plane, _ = remote
    q = dls.SyncQueue("gpu", dispatch=plane)
    assert q.result(q.submit(dls.thunk(jobs.square, 12)), timeout=20) == 144
    gen = q.submit(dls.thunk(jobs.count_up, 3))
    assert list(q.stream(gen, timeout=20)) == [0, 1, 2]
    assert q.result(gen, timeout=5) == 3
    ex = q.submit(envelope=dls.Envelope.for_exec("echo over; echo http"))
    assert list(q.stream(ex, timeout=20)) == ["over", "http"]

    marker = tmp_path / "http-kill.pid"
    inv = q.submit(dls.thunk(jobs.sleep_for, 600, str(marker)))
    child = int(wait_until(lambda: marker.exists() and marker.read_text(), what="job start"))
    assert q.cancel(inv, kill=True)
    wait_until(lambda: q.status(inv).state == "killed", what="killed over HTTP")
    wait_until(lambda: not pid_alive(child), what="the child to be gone")

    row = plane.worker("remote-1")
    assert row.queues == ["gpu"] and row.info["concurrency"] == 2


def test_membership_and_drain_over_http(
    remote: tuple[HttpDispatch, DaemonProcess],
) -> None:
    plane, proc = remote
    other = dls.SyncQueue("cpu", dispatch=plane)
    plane.update_worker_queues("remote-1", add=["cpu"])
    assert other.result(other.submit(dls.thunk(jobs.square, 5)), timeout=20) == 25
    plane.set_worker_state("remote-1", "draining")
    assert proc.wait(timeout=30) == 0


def test_the_daemon_rides_out_a_server_restart_with_its_job_running(tmp_path: Path) -> None:
    home = tmp_path / "server-home"
    home.mkdir()
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    def serve(n: int) -> subprocess.Popen[bytes]:
        log = home / f"server-{n}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-c", LAUNCH, "server", "--port", str(port)],
                env=server_env(home),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        _wait_ready(proc, url, log)
        return proc

    server = serve(1)
    token = (home / "token").read_text().strip()
    proc = DaemonProcess(
        tmp_path,
        "rider",
        ["-q", "outage", "--lease-s", "30"],
        env={"LAKESHORE_URL": url, "LAKESHORE_TOKEN": token},
    )
    try:
        proc.ready()
        with HttpDispatch(url, token=token) as plane:
            q = dls.SyncQueue("outage", dispatch=plane)
            marker = tmp_path / "outage.pid"
            inv = q.submit(dls.thunk(jobs.sleep_for, 1.5, str(marker)))
            wait_until(marker.exists, what="the job to start")
            _stop(server)  # the plane goes away while the job runs
            proc.wait_for("plane.unreachable")
            server = serve(2)
            assert q.result(inv, timeout=60) == "slept"
            assert q.result(q.submit(dls.thunk(jobs.square, 8)), timeout=30) == 64
        assert proc.proc.poll() is None
        proc.wait_for("plane.reconnected")
    finally:
        proc.stop()
        _stop(server)


def test_gpu_placement_over_http(
    server: object, tenant: object, http_plane: Callable[..., HttpDispatch], tmp_path: Path
) -> None:
    """Issue 34 over a real server: the claim sends what is free, the placement comes back on
    the row, and a fractional pair shares one declared GPU."""
    plane = http_plane(namespace=tenant.namespace, token=tenant.token)  # type: ignore[attr-defined]
    proc = DaemonProcess(
        tmp_path,
        "remote-gpus",
        ["-q", "gpus-http", "--gpus", "2", "--gpu-type", "NVIDIA H200", "--lease-s", "5"],
        env={
            "LAKESHORE_URL": server.url,  # type: ignore[attr-defined]
            "LAKESHORE_TOKEN": tenant.token,  # type: ignore[attr-defined]
            "LAKESHORE_NAMESPACE": tenant.namespace,  # type: ignore[attr-defined]
        },
    )
    try:
        proc.ready()
        q = dls.SyncQueue("gpus-http", dispatch=plane, resources={"gpus": 2})
        whole = q.submit(dls.thunk(jobs.placed))
        assert sorted(q.result(whole, timeout=30)["gpus"]) == [0, 1]
        assert q.status(whole).resources == {"gpus": 2}
        meet = str(tmp_path / "halves")
        halves = [
            q.submit(dls.thunk(jobs.placed, meet, 2), resources={"gpus": 0.5, "gpu_type": "H200"})
            for _ in range(2)
        ]
        seen = [q.result(i, timeout=30) for i in halves]
        assert seen[0]["cuda"] == seen[1]["cuda"] and len(seen[0]["gpus"]) == 1
        placement = q.status(halves[0]).placement
        assert placement is not None and placement["worker"] == "remote-gpus"
        assert placement["gpus"][0]["name"] == "NVIDIA H200"
    finally:
        proc.stop()
