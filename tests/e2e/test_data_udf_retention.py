"""Issue 7 retention with real processes: the server's periodic trim, and `queues prune`.

The server runs with tiny ages (`--retain-frames-s 0.5 --retain-invocations-s 2`) and a short
interval; the test waits on the plane's state against a deadline, never on a fixed sleep.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import dreamlake.lakeshore as dls
from dreamlake.lakeshore import spill
from dreamlake.lakeshore.cli.prune import prune as prune_command
from dreamlake.lakeshore.errors import NotFound
from dreamlake.lakeshore.home import home
from dreamlake.lakeshore.plane.default import reset_default_plane
from dreamlake.lakeshore.storage import LocalStorage
from tests.support.server import running_server

pytestmark = pytest.mark.slow


def wait_for(check: Callable[[], bool], *, timeout: float = 20.0, what: str = "") -> None:
    """Re-check real state until it holds; fail at the deadline."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def count_to(n: int) -> Iterator[int]:
    yield from range(n)
    return n


@pytest.fixture
def spill_dir(tmp_path: Path) -> Iterator[LocalStorage]:
    storage = LocalStorage(tmp_path / "spill")
    spill.configure(inline_limit=1024, storage=storage)
    yield storage
    spill.configure()


def test_the_servers_retention_task_trims_frames_then_rows(
    tmp_path: Path, spill_dir: LocalStorage
) -> None:
    args = ("--retain-frames-s", "0.5", "--retain-invocations-s", "2")
    with (
        running_server(tmp_path / "home", extra_args=(*args, "--retention-interval-s", "0.1")) as (
            url,
            token,
        ),
        dls.HttpDispatch(url, token=token) as plane,
    ):
        q = dls.SyncQueue("kept", dispatch=plane)
        inv = q.submit(dls.thunk(count_to, 3))
        spilled = q.submit(dls.thunk(len, b"p" * 5000))  # above the 1 KiB limit: spilled
        dls.run_worker(q, burst=True)
        assert list(q.stream(inv, timeout=5)) == [0, 1, 2]
        assert len(list(spill_dir.list("_objects/"))) == 1

        wait_for(lambda: plane.frames(inv) == [], what="the frames to be trimmed")
        assert q.result(inv, timeout=5) == 3  # the row outlives its journal
        assert list(q.stream(inv, timeout=5)) == []

        def row_gone() -> bool:
            try:
                plane.invocation(spilled)
            except NotFound:
                return True
            return False

        wait_for(row_gone, what="the invocation rows to be trimmed")
        wait_for(lambda: list(spill_dir.list("_objects/")) == [], what="the spill to be deleted")


def test_queues_prune_also_trims_ended_invocations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spill_dir: LocalStorage
) -> None:
    monkeypatch.setenv("LAKESHORE_HOME", str(tmp_path / "home"))
    for name in ("LAKESHORE_URL", "LAKESHORE_NAMESPACE", "LAKESHORE_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    reset_default_plane()
    with dls.Dispatch(home() / "lakeshore.db") as plane:
        q = dls.SyncQueue("work", dispatch=plane)
        ended = q.submit({"blob": b"b" * 5000})
        assert plane.cancel(ended)
        live = q.submit(1)

    kept = CliRunner().invoke(prune_command, ["--older-than", "7d", "--json"])
    trimmed = CliRunner().invoke(prune_command, ["--older-than", "0s", "--json"])

    assert kept.exit_code == 0 and json.loads(kept.output)["trimmed"]["invocations"] == 0
    assert trimmed.exit_code == 0, trimmed.output
    report = json.loads(trimmed.output)["trimmed"]
    assert (report["invocations"], report["refs_deleted"], report["problems"]) == (1, 1, [])
    assert list(spill_dir.list("_objects/")) == []
    with dls.Dispatch(home() / "lakeshore.db") as plane:
        assert plane.invocation(live).state == "queued"
        with pytest.raises(NotFound):
            plane.invocation(ended)
    reset_default_plane()
