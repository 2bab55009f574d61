"""Pickle protocols with real processes: a `lakeshore-daemon` advertises what it loads and fails a
thunk it cannot load with both sides' versions, and `GET /v1/hello` says the server's own.

The daemon serves the embedded plane (a SQLite file under its LAKESHORE_HOME) and runs each job
in a child process, where the thunk is unpickled; the failure must end that job's attempt and
leave the daemon serving (as tests/faults/test_poison_jobs.py asks of every bad payload).
"""

from __future__ import annotations

import pickle
import platform
import sys
from collections.abc import Iterator
from pathlib import Path

import jobs
import pytest
from daemon_harness import JOBS_PATH, wait_until

import dreamlake.lakeshore as dls
from dreamlake.lakeshore import codec, protocols
from dreamlake.lakeshore.plane import Dispatch
from dreamlake.lakeshore.types import SubmitRequest
from tests.support.client import Api
from tests.support.daemons import DaemonProcess
from tests.support.pickles import as_if_pickled_by

pytestmark = pytest.mark.slow

QUEUE = "proto"
NEWER = "3.99.0"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("protocols")


@pytest.fixture(scope="module")
def plane(home: Path) -> Iterator[Dispatch]:
    with Dispatch(home / "lakeshore.db") as plane:
        yield plane
    protocols.forget()


@pytest.fixture(scope="module")
def daemon(home: Path, plane: Dispatch) -> Iterator[DaemonProcess]:
    script = Path(sys.executable).with_name("lakeshore-daemon")
    proc = DaemonProcess(
        home, "proto-1", ["--queue", QUEUE], paths=(JOBS_PATH,), command=[str(script)]
    )
    try:
        yield proc.ready()
    finally:
        proc.stop()


def test_the_daemons_row_says_what_it_loads(plane: Dispatch, daemon: DaemonProcess) -> None:
    (row,) = [w for w in plane.workers() if w.name == "proto-1"]
    assert row.info["runtime"]["python"] == platform.python_version()
    assert row.info["runtime"]["highest_pickle_protocol"] == pickle.HIGHEST_PROTOCOL
    assert row.info["runtime"]["cloudpickle"] == protocols.cloudpickle_version()


def test_a_thunk_from_a_newer_python_fails_naming_both_and_the_daemon_serves_on(
    plane: Dispatch, daemon: DaemonProcess
) -> None:
    # given a job whose thunk a newer Python pickled in protocol 6
    good = codec.encode(dls.Envelope.for_thunk(dls.thunk(jobs.square, 3)))
    (bad,) = plane.submit(QUEUE, [SubmitRequest(payload=as_if_pickled_by(good, NEWER, protocol=6))])

    # when the daemon claims it
    row = wait_until(
        lambda: (r := plane.invocation(bad)).terminal and r, timeout=60, what=f"{bad} ends"
    )

    # then its first attempt failed, naming both Pythons, and nothing crashed
    assert (row.state, row.attempt) == ("failed", 1), row.error
    error = row.error or ""
    assert f"this thunk was pickled by Python {NEWER} (pickle protocol 6" in error
    assert f"this worker runs Python {platform.python_version()} (highest protocol" in error
    assert "unsupported pickle protocol: 6" in error
    q = dls.SyncQueue(QUEUE, dispatch=plane)
    assert q.result(q.submit(dls.thunk(jobs.square, 7)), timeout=30) == 49
    assert daemon.proc.poll() is None, daemon.log_tail()
    assert not daemon.find("worker.task_crashed"), daemon.log_tail()


def test_hello_says_the_servers_own_runtime_and_what_it_means(api: Api) -> None:
    status, hello = api.call("GET", "/v1/hello", token=None)
    assert status == 200
    assert hello["pickle_protocol"] == protocols.DEFAULT_PROTOCOL
    runtime = hello["runtime"]
    assert runtime["python"] == platform.python_version()
    assert runtime["highest_pickle_protocol"] == pickle.HIGHEST_PROTOCOL
    assert runtime["cloudpickle"] == protocols.cloudpickle_version()
    assert "workers" in runtime["role"]
