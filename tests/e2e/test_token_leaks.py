"""Tokens a hostile user of the same box must not get (issue 33, item 5).

(a) A daemon's token is never on its command line, which every user reads in `ps`: it comes
from `--token-file` or the environment, also when the local provider starts the daemon.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jobs
import pytest
from daemon_harness import JOBS_PATH, DaemonProcess, wait_until

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane import HttpDispatch
from dreamlake.lakeshore.providers.base import LaunchSpec
from dreamlake.lakeshore.providers.local import LocalProvider

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


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620], ids=oct)
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
