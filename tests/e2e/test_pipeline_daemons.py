"""A three-stage pipeline through a real `lakeshore server` and real daemons (issue 36, item 4
and its "tests that must pass"): prepare -> train -> evaluate, each stage taking the one before's
result through `dls.output` (prepare's a Ref: the array stays in storage). Daemon A is killed
with -9 mid-train, and daemon B takes the job over once its short lease runs out; the server is
killed with -9 between train and evaluate and restarted on the same store. The pipeline ends
succeeded with each stage run once per attempt; a failed train leaves its evaluate cancelled,
naming it.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pipeline_jobs as stages
import pytest
from daemon_harness import DaemonProcess, wait_until

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import DispatchError
from dreamlake.lakeshore.plane import HttpDispatch
from tests.support.server import LAUNCH, _stop, _wait_ready, free_port, server_env

pytestmark = pytest.mark.slow

N, LR = 1000, 0.001


class Server:
    """One `lakeshore server` on a fixed port and home: killed with -9 and started again, it
    serves the same store at the same address."""

    def __init__(self, home: Path) -> None:
        self.home, self.port = home, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Server:
        log = self.home / f"server-{len(list(self.home.glob('server-*.log')))}.log"
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", LAUNCH, "server", "--port", str(self.port)],
                env=server_env(self.home),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        _wait_ready(self.proc, self.url, log)
        return self

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    home = tmp_path / "server"
    home.mkdir()
    srv = Server(home).start()
    try:
        yield srv
    finally:
        srv.stop()


def _daemon(server: Server, tmp_path: Path, name: str, queue: str) -> DaemonProcess:
    token = (server.home / "token").read_text().strip()
    return DaemonProcess(
        tmp_path / name,
        name,
        ["--queue", queue, "--lease-s", "2", "--storage", (tmp_path / "storage").as_uri()],
        env={"LAKESHORE_URL": server.url, "LAKESHORE_TOKEN": token},
    ).ready()


def test_a_pipeline_survives_kill_9_of_its_daemon_and_of_the_server(
    server: Server, tmp_path: Path
) -> None:
    log = str(tmp_path / "runs.log")
    token = (server.home / "token").read_text().strip()
    daemons = [_daemon(server, tmp_path, "box-a", "pipe")]
    with contextlib.ExitStack() as stack:
        stack.callback(lambda: [d.stop() for d in daemons])
        plane = stack.enter_context(HttpDispatch(server.url, token=token))
        q, late = dls.SyncQueue("pipe", dispatch=plane), dls.SyncQueue("pipe-eval", dispatch=plane)
        prepared = q.submit(dls.thunk(stages.prepare, log, N))
        trained = q.submit(dls.thunk(stages.train, dls.output(prepared), log, LR), max_attempts=1)
        # Evaluate is served by no daemon yet: it stays queued between the stages.
        evaluated = late.submit(dls.thunk(stages.evaluate, dls.output(trained), log))
        assert q.status(evaluated).state == "waiting"

        wait_until(lambda: "train 1" in stages.runs(log), timeout=60, what="train attempt 1")
        daemons[0].kill9()  # mid-train: the lease runs out, and B takes the job over
        daemons.append(_daemon(server, tmp_path, "box-b", "pipe"))
        assert q.result(trained, timeout=60) == {"w": pytest.approx(sum(range(N)) * LR)}
        assert late.status(evaluated).state == "queued"

        server.kill9()  # between the stages
        server.start()
        assert late.status(evaluated).state == "queued"
        daemons.append(_daemon(server, tmp_path, "box-c", "pipe-eval"))
        assert late.result(evaluated, timeout=60) == round(sum(range(N)) * LR, 3)

        assert sorted(stages.runs(log)) == ["evaluate 1", "prepare 1", "train 1", "train 2"]
        rows = [plane.invocation(i) for i in (prepared, trained, evaluated)]
        assert [r.state for r in rows] == ["succeeded"] * 3
        assert rows[1].attempt == 2 and rows[1].ended_by == "daemon_lost"
        assert isinstance(dls.decode(rows[0].result or b""), dls.Ref)  # a Ref, not the bytes
        assert np.asarray(dls.get(q.result(prepared, ref=True))).shape == (N,)

        # A failed train leaves its evaluate cancelled, naming it.
        broken = q.submit(dls.thunk(stages.broken_train, dls.output(prepared), log), max_attempts=1)
        orphan = late.submit(dls.thunk(stages.evaluate, dls.output(broken), log))
        with pytest.raises(DispatchError, match=f"parent {broken} ended failed"):
            late.result(orphan, timeout=60)
        assert late.status(orphan).state == "cancelled"
        assert stages.runs(log).count("evaluate 1") == 1  # the orphan never ran
