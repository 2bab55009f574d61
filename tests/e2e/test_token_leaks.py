"""Tokens a hostile user of the same box must not get (issue 33, item 5).

(a) A daemon's token is never on its command line, which every user reads in `ps`: it comes
from `--token-file` or the environment, also when the local provider starts the daemon.
(b) A job's process holds none of its daemon's credentials (environment, first environment, the
daemon's own), only a token of its own that cannot act as the worker and dies with the attempt.
(c) The admin token a server writes to its home goes to that server only: another port of the
same box is another server, which any user may run.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import jobs
import pytest
from daemon_harness import JOBS_PATH, DaemonProcess, wait_until

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import Unauthorized
from dreamlake.lakeshore.plane import HttpDispatch
from dreamlake.lakeshore.plane.dispatch import open_store
from dreamlake.lakeshore.providers.base import LaunchSpec
from dreamlake.lakeshore.providers.local import LocalProvider
from tests.support.server import LAUNCH, server_process

pytestmark = pytest.mark.slow


def cmdline(pid: int) -> bytes:
    """What `ps` shows every user of the box: the process's arguments."""
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def token_file(folder: Path, token: str, mode: int = 0o600) -> Path:
    path = folder / "daemon.token"
    path.write_text(token + "\n")
    path.chmod(mode)
    return path


@pytest.fixture
def tenant_plane(server: Any, tenant: Any) -> Iterator[HttpDispatch]:
    with HttpDispatch(server.url, token=tenant.token, namespace=tenant.namespace) as plane:
        yield plane


def test_a_daemon_given_a_token_file_works_and_its_command_line_holds_no_token(
    server: Any, tenant: Any, tenant_plane: HttpDispatch, tmp_path: Path
) -> None:
    path = token_file(tmp_path, tenant.token)
    daemon = DaemonProcess(
        tmp_path,
        "from-file",
        [
            "-q",
            "filed",
            "--url",
            server.url,
            "--namespace",
            tenant.namespace,
            "--token-file",
            str(path),
        ],
    )
    try:
        daemon.ready()
        q = dls.SyncQueue("filed", dispatch=tenant_plane)
        assert q.result(q.submit(dls.thunk(jobs.square, 9)), timeout=30) == 81

        assert str(path).encode() in cmdline(daemon.pid)  # the path, which is no secret
        assert tenant.token.encode() not in cmdline(daemon.pid)
    finally:
        daemon.stop()


@pytest.mark.parametrize("mode", [0o644, 0o620], ids=oct)  # the rest: test_token_file.py
def test_a_token_file_other_users_may_open_is_refused_naming_it_and_its_mode(
    server: Any, tenant: Any, tmp_path: Path, mode: int
) -> None:
    path = token_file(tmp_path, tenant.token, mode)
    daemon = DaemonProcess(
        tmp_path, "open-file", ["-q", "filed", "--url", server.url, "--token-file", str(path)]
    )

    assert daemon.wait(timeout=30) == 2  # a usage error: nothing was started
    tail = daemon.log_tail()
    assert f"the token file {path} is open to other users (mode {mode:04o})" in tail
    assert f"chmod 600 {path}" in tail
    assert tenant.token not in tail


def test_the_local_provider_hands_its_daemons_the_token_outside_their_command_line(
    server: Any, tenant: Any, tenant_plane: HttpDispatch, tmp_path: Path
) -> None:
    provider = LocalProvider(
        "here",
        {"state_dir": str(tmp_path / "state"), "env": {"PYTHONPATH": JOBS_PATH}},
    )
    spec = LaunchSpec(
        namespace=tenant.namespace,
        queues=("launched",),
        name="tok",
        target="launched",
        plane_url=server.url,
        plane_token=tenant.token,
    )
    (instance,) = provider.launch(spec, 1)
    try:
        record = provider._read(instance.id)
        assert record is not None
        q = dls.SyncQueue("launched", dispatch=tenant_plane)
        assert q.result(q.submit(dls.thunk(jobs.square, 4)), timeout=60) == 16

        assert tenant.token.encode() not in cmdline(record["pid"])
    finally:
        provider.terminate([instance.id])
        wait_until(lambda: not provider.list(), timeout=30, what="the launched daemon to leave")


def test_token_and_token_file_on_one_command_line_are_refused(
    server: Any, tenant: Any, tmp_path: Path
) -> None:
    path = token_file(tmp_path, tenant.token)
    daemon = DaemonProcess(
        tmp_path,
        "both",
        ["--url", server.url, "--token", "lks_typed", "--token-file", str(path)],
    )

    assert daemon.wait(timeout=30) == 2
    assert "give --token or --token-file, not both" in daemon.log_tail()


# -- (c) the box's admin token goes to the server that wrote it, and nowhere else ---------------


class Recorder(http.server.BaseHTTPRequestHandler):
    """Another server on this box: it notes each request's headers and refuses it."""

    seen: ClassVar[list[dict[str, str]]] = []

    def do_GET(self) -> None:
        self.seen.append({k.lower(): v for k, v in self.headers.items()})
        body = json.dumps({"error": {"code": "unauthorized", "message": "who are you?"}}).encode()
        self.send_response(401)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def stranger() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A listening socket on another port of this box: its URL and the headers it received."""
    seen: list[dict[str, str]] = []
    handler = type("Seen", (Recorder,), {"seen": seen})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`lakeshore ...` as a user of this box runs it: its home, no token of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESHORE_")}
    env["LAKESHORE_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-c", LAUNCH, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_home_token_goes_to_the_server_that_wrote_it_and_not_to_another_port(
    server: Any, stranger: tuple[str, list[dict[str, str]]]
) -> None:
    url, seen = stranger

    elsewhere = cli(server.home, "queues", "ls", "--url", url)

    assert seen, elsewhere.stderr  # the request reached the stranger...
    assert all("authorization" not in headers for headers in seen)  # ...without the token
    assert server.token not in json.dumps(seen)

    issuer = cli(server.home, "queues", "ls", "--url", server.url, "--json")
    assert issuer.returncode == 0, issuer.stderr
    assert any(row["name"] == "default" for row in json.loads(issuer.stdout))


def test_a_restarted_server_is_reached_on_its_new_port_and_a_stopped_one_on_none(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    with server_process(home) as first:
        port = urlsplit(first.url).port
        assert json.loads((home / "token.address").read_text())["listen"] == [["127.0.0.1", port]]
    assert not (home / "token.address").exists()  # stopped: its port is anyone's again

    with server_process(home) as second:  # the same store and token, another free port
        assert second.token == first.token and second.url != first.url
        assert cli(home, "queues", "ls", "--url", second.url).returncode == 0
        refused = cli(home, "queues", "ls", "--url", first.url)
        assert refused.returncode != 0


# -- (b) a job holds none of its daemon's credentials, only a token of its own -------------------


def serving_daemon(
    server: Any, tmp_path: Path, namespace: str, token: str, queue: str
) -> DaemonProcess:
    """A daemon given its token and the signing key as systemd gives them: in its environment."""
    key = (server.home / "signing.key").read_text().strip()
    env = {
        "LAKESHORE_URL": server.url,
        "LAKESHORE_TOKEN": token,
        "LAKESHORE_NAMESPACE": namespace,
        "LAKESHORE_SIGNING_KEY": key,
    }
    return DaemonProcess(tmp_path, f"{queue}-daemon", ["-q", queue, "-c", "2"], env=env).ready()


def test_a_job_finds_none_of_its_daemons_credentials(
    server: Any, tenant: Any, tenant_plane: HttpDispatch, tmp_path: Path
) -> None:
    key = (server.home / "signing.key").read_text().strip()
    daemon = serving_daemon(server, tmp_path, tenant.namespace, tenant.token, "creds")
    try:
        q = dls.SyncQueue("creds", dispatch=tenant_plane)
        found = q.result(q.submit(dls.thunk(jobs.credentials_in_reach)), timeout=30)
    finally:
        daemon.stop()

    for secret in (tenant.token, key):
        assert secret not in json.dumps(found["env"])
        assert secret not in found["proc_self_environ"]  # what the process started with
    assert str(found["env"]["LAKESHORE_TOKEN"]).startswith("lksj_")  # its own, below
    if os.geteuid() != 0:  # root reads every process's environment whatever the daemon does
        assert found["daemon_environ"] is None


def test_a_jobs_token_cannot_act_as_its_worker_and_ends_with_its_attempt(
    server: Any, tenant: Any, tenant_plane: HttpDispatch, tmp_path: Path
) -> None:
    daemon = serving_daemon(server, tmp_path, tenant.namespace, tenant.token, "thief")
    try:
        q = dls.SyncQueue("thief", dispatch=tenant_plane)
        tried = q.result(q.submit(dls.thunk(jobs.act_as_a_worker, "thief", 7)), timeout=30)

        for verb in ("claim", "ack", "renew", "register"):
            kind, message = tried[verb]
            assert kind == "Forbidden", (verb, tried[verb])
            assert "needs a token with the 'work' scope" in message
            assert "this token's scopes: job, read, submit-data, submit-code" in message
        kind, follow_up = tried["submit"]  # what a job may do: its daemon's token could
        assert kind == "ok" and q.result(follow_up, timeout=30) == 49
        assert tried["put"][0] == "ok"
    finally:
        daemon.stop()

    token = tried["token"]
    assert token.startswith("lksj_") and tenant.token not in json.dumps(tried)

    def refused() -> bool:
        try:
            HttpDispatch(server.url, token=token, namespace=tenant.namespace).count("thief")
        except Unauthorized:
            return True
        return False

    wait_until(refused, timeout=30, what="the job's token to die with its attempt")


def test_a_work_only_daemons_jobs_still_spill_through_the_plane_and_submit_nothing(
    server: Any, tenant: Any, tenant_plane: HttpDispatch, tmp_path: Path
) -> None:
    store = open_store(server.store_path)
    try:
        work_only = store.create_token(tenant.namespace, label="gpu", scopes=["work"])
    finally:
        store.close()
    daemon = serving_daemon(server, tmp_path, tenant.namespace, work_only, "spill")
    try:
        q = dls.SyncQueue("spill", dispatch=tenant_plane)
        big = q.result(q.submit(dls.thunk(jobs.big_result, 1_000_000)), timeout=60)
        tried = q.result(q.submit(dls.thunk(jobs.act_as_a_worker, "spill", 3)), timeout=30)
    finally:
        daemon.stop()

    assert big == b"r" * 1_000_000  # written to the plane tier with the job's token
    assert tried["put"][0] == "ok"
    kind, message = tried["submit"]
    assert kind == "Forbidden" and "this token's scopes: job" in message
    assert tried["claim"][0] == "Forbidden"
