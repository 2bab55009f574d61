"""What ends a job on a real daemon, recorded as its cause (issues 34 and 35): out of host memory
apart from any other death; over its GPU memory share; on a GPU that failed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import jobs
import pytest
from daemon_harness import DaemonProcess

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane import Dispatch

pytestmark = pytest.mark.slow

QUEUE = "causes"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lakeshore")


@pytest.fixture(scope="module")
def oom_counter(home: Path) -> Path:
    """The daemon's OOM-kill counter (daemon/oom.py's seam): the real ones move only when the
    kernel kills for memory, which a test on a shared box must not set off."""
    counter = home / "oom_kill"
    counter.write_text("0")
    return counter


@pytest.fixture(scope="module")
def plane(home: Path) -> Iterator[Dispatch]:
    with Dispatch(home / "lakeshore.db") as plane:
        yield plane


@pytest.fixture(scope="module")
def daemon(home: Path, plane: Dispatch, oom_counter: Path) -> Iterator[DaemonProcess]:
    env = {"LAKESHORE_OOM_COUNTERS": str(oom_counter)}
    proc = DaemonProcess(home, "causes-1", ["--queue", QUEUE, "--concurrency", "2"], env=env)
    try:
        yield proc.ready()
    finally:
        proc.stop()


@pytest.fixture
def q(plane: Dispatch, daemon: DaemonProcess) -> dls.SyncQueue:
    return dls.SyncQueue(QUEUE, dispatch=plane)


def test_a_memory_error_under_an_rlimit_is_out_of_host_memory(q: dls.SyncQueue) -> None:
    inv = q.submit(dls.thunk(jobs.allocate_past_rlimit), max_attempts=3)
    with pytest.raises(dls.DispatchError, match="ran out of host memory"):
        q.result(inv, timeout=30)

    row = q.status(inv)
    assert (row.state, row.ended_by, row.attempt) == ("failed", "oom", 1)  # not retried
    assert row.error is not None and "MemoryError" in row.error
    assert q.result(q.submit(dls.thunk(jobs.square, 4)), timeout=30) == 16  # the slot goes on


def test_a_sigkill_while_the_oom_counter_moved_is_out_of_host_memory(
    q: dls.SyncQueue, oom_counter: Path
) -> None:
    inv = q.submit(dls.thunk(jobs.sigkill_self, str(oom_counter)))
    with pytest.raises(dls.DispatchError, match="ran out of host memory"):
        q.result(inv, timeout=30)

    row = q.status(inv)
    assert (row.state, row.ended_by) == ("failed", "oom")
    assert row.error is not None and "OOM killer" in row.error


def test_a_sigkill_with_no_oom_kill_counted_is_a_death(q: dls.SyncQueue) -> None:
    inv = q.submit(dls.thunk(jobs.sigkill_self))
    with pytest.raises(dls.DispatchError, match="not by the OOM killer"):
        q.result(inv, timeout=30)
    assert (q.status(inv).state, q.status(inv).ended_by) == ("failed", "died")
