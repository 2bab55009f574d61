"""A client given several replicas carries on, with no error surfaced, when one is killed.

Two `lakeshore server` replicas share one Postgres plane. The producer and a daemon are given
both URLs (`--url a,b`, comma-separated, as LAKESHORE_URL takes them). Replica a is killed with
-9 mid-run: reads and submits go on to b at once (a submit is sent again safely, its ids minted
by the client), the daemon's next claim does too, and every job submitted before and after the
kill ends succeeded, once.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from procs import DaemonProcess, ServerProcess, wait_until

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.plane import HttpDispatch
from tests.support.postgres import postgres_schema

pytestmark = pytest.mark.slow


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    with postgres_schema("lakeshore_failover") as store:
        a = ServerProcess(tmp_path / "a", store).start()
        b = ServerProcess(tmp_path / "b", store, env={"LAKESHORE_TOKEN": a.token}).start()
        try:
            yield a, b
        finally:
            a.stop()
            b.stop()


def test_a_replica_killed_mid_run_is_passed_over(
    replicas: tuple[ServerProcess, ServerProcess], tmp_path: Path
) -> None:
    a, b = replicas
    both = f"{a.url},{b.url}"
    daemon = DaemonProcess(tmp_path / "d", "fo-1", ["-q", "fo"], url=both, token=a.token).ready()
    try:
        with HttpDispatch(both, token=a.token, timeout_s=5) as plane:
            q = dls.SyncQueue("fo", dispatch=plane)
            before = [q.submit(dls.thunk(pow, 2, n)) for n in range(3)]
            assert [q.result(inv, timeout=30) for inv in before] == [1, 2, 4]

            a.kill9()
            after = [q.submit(dls.thunk(pow, 2, n)) for n in range(3, 6)]

            assert [q.result(inv, timeout=30) for inv in after] == [8, 16, 32]
            assert plane.url == b.url
            assert q.count("succeeded") == 6 and q.count("queued") == q.count("running") == 0
            wait_until(lambda: daemon.proc.poll() is None, timeout=1, what="the daemon serves on")
    finally:
        daemon.stop()


def test_a_list_with_an_empty_entry_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="empty entry"):
        HttpDispatch("http://127.0.0.1:1,,http://127.0.0.1:2", token="t")
