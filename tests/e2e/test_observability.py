"""Metrics and logs of real processes: a daemon's /metrics after it ran jobs, a controller's
after it ticked, and the JSON lines a server and a controller write (docs/observability.md).

Every option here comes from the environment where the process reads one
(LAKESHORE_DAEMON_METRICS_PORT, LAKESHORE_CONTROLLER_<OPTION>), so the env convention is
exercised by the same runs. Waits poll real state (a scrape, a log line) against a deadline.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jobs
import pytest
from daemon_harness import DaemonProcess, daemon_env, wait_until
from prometheus_client.parser import text_string_to_metric_families

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import DispatchError
from dreamlake.lakeshore.plane import Dispatch, HttpDispatch
from dreamlake.lakeshore.types import SubmitRequest
from tests.support.server import free_port, server_process

pytestmark = pytest.mark.slow

CONTROLLER = "from dreamlake.lakeshore.controller.main import main; main()"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples:
    response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5.0)
    assert response.status_code == 200
    out: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def json_lines(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line still being written
    return out


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[Dispatch]:
    with Dispatch(tmp_path / "lakeshore.db") as plane:
        yield plane


def test_daemon_metrics_count_the_jobs_it_ran(tmp_path: Path, plane: Dispatch) -> None:
    port = free_port()
    daemon = DaemonProcess(
        tmp_path,
        "metered",
        ["--queue", "metered", "--lease-s", "1.5", "--metrics-addr", "127.0.0.1"],
        env={"LAKESHORE_DAEMON_METRICS_PORT": str(port)},
    )
    try:
        daemon.ready()
        assert daemon.wait_for("daemon.metrics_serving")["port"] == port
        before = scrape(port)
        assert value(before, "lakeshore_daemon_slots", state="idle") == 1.0
        assert (
            value(before, "lakeshore_daemon_jobs_total", queue="metered", outcome="succeeded") == 0
        )

        # when it runs one job that succeeds (long enough for a lease renewal) and one that fails
        q = dls.SyncQueue("metered", dispatch=plane)
        ok = q.submit(dls.thunk(jobs.sleep_for, 1.2))
        bad = q.submit(dls.thunk(jobs.boom, "on purpose"))
        assert q.result(ok, timeout=30) == "slept"
        with pytest.raises(DispatchError):
            q.result(bad, timeout=30)

        # then its counters moved by exactly that
        after = scrape(port)
        jobs_total = "lakeshore_daemon_jobs_total"
        assert value(after, jobs_total, queue="metered", outcome="succeeded") == 1.0
        assert value(after, jobs_total, queue="metered", outcome="failed") == 1.0
        assert value(after, "lakeshore_daemon_job_run_seconds_count", queue="metered") == 2.0
        assert value(after, "lakeshore_daemon_job_run_seconds_sum", queue="metered") >= 1.2
        assert value(after, "lakeshore_daemon_claim_wait_seconds_count") >= 1.0
        assert value(after, "lakeshore_daemon_lease_renewals_total") >= 1.0
        assert value(after, "lakeshore_daemon_lease_losses_total") == 0.0
        # both jobs shipped this test's own `jobs` module (issue 46): fetched once, then a hit
        assert value(after, "lakeshore_daemon_runtime_bundle_misses_total") == 1.0
        assert value(after, "lakeshore_daemon_runtime_bundle_hits_total") == 1.0
        assert value(after, "lakeshore_daemon_runtime_bundle_bytes_fetched_total") > 0
        assert value(after, "lakeshore_daemon_runtime_environment_misses_total") == 0.0
        busy = value(after, "lakeshore_daemon_slots", state="busy")
        assert busy + value(after, "lakeshore_daemon_slots", state="idle") == 1.0
        # and its log named both jobs by invocation, as the server's and controller's do
        assert daemon.find("job.succeeded", invocation=ok) is not None
        assert daemon.find("job.failed", invocation=bad) is not None
    finally:
        daemon.stop()


def test_controller_metrics_and_json_log_after_ticks(tmp_path: Path, plane: Dispatch) -> None:
    plane.add_provider("sim", "fake", {})
    plane.create_queue("elastic", elasticity={"kind": "fully_elastic", "max": 2, "provider": "sim"})
    plane.submit("elastic", [SubmitRequest(payload=b"\x90") for _ in range(3)])
    port = free_port()
    env = {
        "LAKESHORE_CONTROLLER_STORE": str(tmp_path / "lakeshore.db"),
        "LAKESHORE_CONTROLLER_INTERVAL_S": "0.05",
        "LAKESHORE_CONTROLLER_METRICS_PORT": str(port),
        "LAKESHORE_CONTROLLER_METRICS_ADDR": "127.0.0.1",
        "LAKESHORE_CONTROLLER_LOG_JSON": "true",
    }
    log_path = tmp_path / "controller.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", CONTROLLER],
            env=daemon_env(tmp_path, env),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:

        def ticked() -> Samples | None:
            if proc.poll() is not None:
                raise AssertionError(f"controller exited:\n{log_path.read_text()}")
            try:
                found = scrape(port)
            except httpx.TransportError:
                return None
            return (
                found
                if value(found, "lakeshore_controller_ticks_total", result="ok") >= 2
                else None
            )

        samples = wait_until(ticked, timeout=30, what="two controller ticks on /metrics")
        queue = {"namespace": "default", "queue": "elastic", "target": "queue/elastic"}
        assert value(samples, "lakeshore_controller_desired_workers", **queue) == 2.0
        assert value(samples, "lakeshore_controller_leader") == 1.0
        launch = {"namespace": "default", "target": "queue/elastic", "kind": "launch"}
        assert value(samples, "lakeshore_controller_tick_decisions_total", **launch) == 1.0
        call = {"namespace": "default", "provider": "sim", "kind": "fake", "call": "launch"}
        assert value(samples, "lakeshore_controller_provider_call_seconds_count", **call) == 1.0

        lines = json_lines(log_path)
        events = [line["event"] for line in lines]
        assert "controller.metrics_serving" in events and "controller.leading" in events
        [decision] = [line for line in lines if line["event"] == "controller.decision"]
        assert (decision["target"], decision["launch"], decision["desired"]) == (
            "queue/elastic",
            2,
            2,
        )
        assert all(line["level"] and line["timestamp"] for line in lines)
    finally:
        proc.terminate()
        proc.wait(15)


def test_server_logs_json_lines_naming_the_invocation(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with server_process(home, extra_args=("--log-level", "info")) as srv:
        headers = {"Authorization": f"Bearer {srv.token}"}
        base = f"{srv.url}/v1/namespaces/default"
        with HttpDispatch(srv.url, token=srv.token, namespace="default") as producer:
            [inv_id] = producer.submit("logged", [SubmitRequest(payload=b"\x90")])
        with httpx.Client(headers=headers, timeout=10.0) as client:
            assert client.get(f"{base}/invocations/{inv_id}").status_code == 200
        port = srv.url.rsplit(":", 1)[1]
        log_path = home / f"server-{port}.log"

        def request_line() -> dict[str, Any] | None:
            for line in json_lines(log_path):
                if line.get("event") == "http.request" and line.get("invocation") == inv_id:
                    return line
            return None

        line = wait_until(request_line, timeout=10, what="the GET's access line")
        assert (line["method"], line["status"], line["level"]) == ("GET", 200, "info")
        assert line["logger"] == "uvicorn.access"
        assert any(e.get("event") == "server.ready" for e in json_lines(log_path))
