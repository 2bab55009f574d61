"""`lakeshore daemon launch` / `daemon stop` end to end: the real CLI, the local provider, real
daemon processes, on the embedded plane and through a real `lakeshore server`.

A stored `local` provider config launches a fleet of two (`--wait` returns once both have
registered), the fleet runs jobs, `daemon stop fleet-00` drains that one daemon alone (its row
goes `gone`, its process exits, fleet-01 keeps serving) and `daemon stop fleet` the rest of the
launch. Every process the test started is killed on the way out, whatever happened.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jobs
import pytest
from daemon_harness import JOBS_PATH, daemon_env, pid_alive, wait_until

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane import Dispatch, HttpDispatch
from dreamlake.lakeshore.plane.base import Plane
from dreamlake.lakeshore.providers import registry
from dreamlake.lakeshore.providers.base import TAG_GROUP

pytestmark = pytest.mark.slow

CLI = (sys.executable, "-c", "from dreamlake.lakeshore.cli.main import main; main()")
#: Per CLI call; `launch --wait` and `stop` carry their own, shorter, deadlines.
CLI_TIMEOUT_S = 60.0


@dataclass
class Fleet:
    """How to run the CLI against one plane, and where the local provider keeps its state."""

    plane: Plane
    env: dict[str, str]
    opts: tuple[str, ...]
    state_dir: Path

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*CLI, *args, *self.opts],
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
        )
        if check:
            assert done.returncode == 0, f"lakeshore {' '.join(args)}:\n{done.stdout}{done.stderr}"
        return done

    def records(self) -> list[dict[str, Any]]:
        """The local provider's state files: one per launched daemon process."""
        out = []
        for path in self.state_dir.glob("*.json"):
            with contextlib.suppress(OSError, ValueError):
                out.append(json.loads(path.read_text()))
        return out

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.state_dir.glob("*.log"))
        )


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def kill_launched(state_dir: Path, seen: dict[int, str | None]) -> None:
    """SIGKILL every daemon the provider started (and its job processes: each daemon leads its
    own session) that is still the process we saw, whether or not its state file is left."""
    for path in state_dir.glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(path.read_text())
            seen.setdefault(int(record["pid"]), record.get("start"))
    for pid, start in seen.items():
        if pid_alive(pid) and (start is None or _start_time(pid) == start):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


def run_fleet(fleet: Fleet) -> None:
    seen: dict[int, str | None] = {}
    try:
        _launch_serve_stop(fleet, seen)
    except BaseException:
        print(fleet.logs())  # shown by pytest on failure
        raise
    finally:
        kill_launched(fleet.state_dir, seen)


def _launch_serve_stop(fleet: Fleet, seen: dict[int, str | None]) -> None:
    plane = fleet.plane
    settings = {"state_dir": str(fleet.state_dir), "lease_s": 3, "env": {"PYTHONPATH": JOBS_PATH}}
    fleet.cli(
        "providers",
        "add",
        "here",
        "--kind",
        "local",
        *(f"--set={k}={json.dumps(v)}" for k, v in settings.items()),
    )
    assert plane.provider("here").config == settings

    # launch --wait: exits 0 only once both daemons have registered, alive
    launched = fleet.cli(
        "daemon",
        "launch",
        "--provider",
        "here",
        "--queue",
        "q",
        "--count",
        "2",
        "--name",
        "fleet",
        "--wait",
        "--timeout-s",
        "30",
    )
    for record in fleet.records():
        seen[int(record["pid"])] = record.get("start")
    assert "fleet-00, fleet-01" in launched.stdout
    assert "2/2" in launched.stdout  # the progress display's last frame
    rows = {w.name: w for w in plane.workers()}
    assert sorted(rows) == ["fleet-00", "fleet-01"]
    assert all(w.state == "alive" and w.queues == ["q"] for w in rows.values())
    listed = json.loads(fleet.cli("daemon", "list", "--json").stdout)
    assert sorted((d["name"], d["state"]) for d in listed) == [
        ("fleet-00", "alive"),
        ("fleet-01", "alive"),
    ]

    # the rows are the provider's processes, tagged with the launch
    records = {r["tags"]["lakeshore:daemon"]: r for r in fleet.records()}
    assert sorted(records) == ["fleet-00", "fleet-01"]
    for name, record in records.items():
        assert record["pid"] == rows[name].pid
        tags = record["tags"]
        assert tags["lakeshore:group"] == "fleet" and tags["lakeshore:owner"] == "cli"
        assert tags["lakeshore:namespace"] == plane.namespace
    pids = {name: int(record["pid"]) for name, record in records.items()}

    # jobs submitted to q complete on the fleet
    q = dls.SyncQueue("q", dispatch=plane)
    invs = [q.submit(dls.thunk(jobs.square, i)) for i in range(20)]
    assert [q.result(inv, timeout=20) for inv in invs] == [i * i for i in range(20)]
    ran_on = {plane.invocation(inv).worker for inv in invs}
    assert ran_on and ran_on <= {"fleet-00", "fleet-01"}  # the worker's name

    # stop fleet-00: that daemon drains and leaves; fleet-01 is untouched
    stopped = fleet.cli("daemon", "stop", "fleet-00", "--timeout-s", "20")
    assert "draining 1 daemon(s): fleet-00" in stopped.stdout
    gone = rows["fleet-00"].id
    wait_until(lambda: plane.worker(gone).state == "gone", timeout=10, what="fleet-00 gone")
    wait_until(lambda: not pid_alive(pids["fleet-00"]), timeout=10, what="fleet-00 exited")
    assert [(w.name, w.state) for w in plane.workers()] == [("fleet-01", "alive")]
    assert pid_alive(pids["fleet-01"])

    # fleet-01 still serves q alone
    inv = q.submit(dls.thunk(jobs.square, 7))
    assert q.result(inv, timeout=20) == 49
    assert plane.invocation(inv).worker == "fleet-01"

    # stop fleet: the rest of the launch
    stopped = fleet.cli("daemon", "stop", "fleet", "--timeout-s", "20")
    assert "draining 1 daemon(s): fleet-01" in stopped.stdout
    wait_until(
        lambda: plane.worker(rows["fleet-01"].id).state == "gone", timeout=10, what="fleet-01 gone"
    )
    wait_until(lambda: not pid_alive(pids["fleet-01"]), timeout=10, what="fleet-01 exited")
    assert plane.workers() == []
    assert json.loads(fleet.cli("daemon", "list", "--json").stdout) == []
    # the provider knows no live instance of the launch (a record whose process exited is
    # forgotten by list(); the stop may have listed it in the moment between gone and exit)
    provider = registry.build("local", "here", settings)
    assert provider.list({TAG_GROUP: "fleet"}) == []
    assert not fleet.records()


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[Fleet]:
    with Dispatch(tmp_path / "lakeshore.db") as plane:
        yield Fleet(plane, daemon_env(tmp_path), (), tmp_path / "local-state")


def test_launch_and_stop_on_the_embedded_plane(embedded: Fleet) -> None:
    run_fleet(embedded)


def test_launch_and_stop_through_a_server(
    server: object,
    tenant: object,
    http_plane: Callable[..., HttpDispatch],
    tmp_path: Path,
) -> None:
    namespace, token = tenant.namespace, tenant.token  # type: ignore[attr-defined]
    plane = http_plane(namespace=namespace, token=token)
    env = daemon_env(tmp_path, {"LAKESHORE_TOKEN": token})  # the CLI's token from the environment
    opts = ("--url", server.url, "--namespace", namespace)  # type: ignore[attr-defined]
    run_fleet(Fleet(plane, env, opts, tmp_path / "local-state"))


def test_launch_wait_fails_at_once_when_a_daemon_dies_before_registering(
    embedded: Fleet,
) -> None:
    # Given a provider whose daemons refuse their command line (the string is split as a shell
    # would, so the daemon sees one unknown option, not one argument per character)
    settings = {"state_dir": str(embedded.state_dir), "args": "--no-such-option"}
    embedded.cli(
        "providers",
        "add",
        "broken",
        "--kind",
        "local",
        *(f"--set={k}={json.dumps(v)}" for k, v in settings.items()),
    )

    # When a launch waits for them, with a deadline far longer than the test
    done = embedded.cli(
        "daemon",
        "launch",
        "--provider",
        "broken",
        "--queue",
        "q",
        "--count",
        "1",
        "--name",
        "doomed",
        "--wait",
        "--timeout-s",
        "600",
        check=False,
    )

    # Then it fails as soon as the process is gone, naming the daemon
    assert done.returncode == 1, done.stdout + done.stderr
    assert "exited before registering: doomed-00" in done.stderr
    assert "--no-such-option" in embedded.logs()


def test_stopping_a_daemon_that_does_not_exist_is_an_error(embedded: Fleet) -> None:
    done = embedded.cli("daemon", "stop", "ghost", check=False)

    assert done.returncode == 1
    assert "no daemon named 'ghost'" in done.stderr
