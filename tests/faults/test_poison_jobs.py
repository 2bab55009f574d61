"""Poison: jobs that attack the daemon that runs them end as a failed attempt, never the daemon.

One real `lakeshore server` (bodies capped at 1 MiB) and one real
`lakeshore-daemon` with a `--handler` serve the whole family. Each poison job must end `failed`
(or, for a long timeout, succeed) on its first attempt with an error that says what went wrong,
and the same daemon must then still run an ordinary job: none of them may crash it, and none may
come back to the queue unspent (that is how one poison job took down a whole fleet).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import fault_jobs
import pytest
from procs import DaemonProcess, ServerProcess, wait_until

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.plane import HttpDispatch
from dreamlake.lakeshore.types import SubmitRequest

pytestmark = pytest.mark.slow

QUEUE = "pz"
THIRTY_DAYS_S = 30 * 86400.0


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HttpDispatch, DaemonProcess]]:
    root = tmp_path_factory.mktemp("poison")
    with ServerProcess(root / "server", args=["--max-body-mb", "1"]) as server:
        daemon = DaemonProcess(
            root / "daemons",
            "pz-1",
            ["-q", QUEUE, "--handler", "fault_jobs:poison_handler", "--kill-grace-s", "0.5"],
            url=server.url,
            token=server.token,
        ).ready()
        try:
            with HttpDispatch(server.url, token=server.token) as plane:
                yield plane, daemon
        finally:
            daemon.stop()


def ended(plane: HttpDispatch, inv: str) -> Any:
    return wait_until(
        lambda: (row := plane.invocation(inv)).terminal and row, timeout=60, what=f"{inv} ends"
    )


POISON = {
    "a timeout of 30 days": (dict(timeout_s=THIRTY_DAYS_S), "succeeded", ""),
    "a timeout of 10^10 s": (dict(timeout_s=1e10), "succeeded", ""),
    "an undecodable payload": (dict(raw=b"\xc1\xc1\xc1"), "failed", "decode"),
    "an exception with no printable message": ({"op": "unprintable"}, "failed", "Unprintable"),
    "SystemExit from a handler": ({"op": "exit"}, "failed", "SystemExit"),
    "KeyboardInterrupt from a handler": ({"op": "interrupt"}, "failed", "KeyboardInterrupt"),
    "a result the codec cannot carry": (dls.thunk(object), "failed", "object"),
    "a frame the codec cannot carry": (dls.thunk(fault_jobs.bad_frame), "failed", "encode"),
    "a body that exits the process": (dls.thunk(fault_jobs.hard_exit, 7), "failed", "exit"),
}


@pytest.mark.parametrize("case", list(POISON))
def test_a_poison_job_ends_its_attempt_and_the_daemon_serves_on(
    fleet: tuple[HttpDispatch, DaemonProcess], case: str
) -> None:
    plane, daemon = fleet
    q = dls.SyncQueue(QUEUE, dispatch=plane)
    body, state, says = POISON[case]
    if isinstance(body, dict) and "raw" in body:
        (inv,) = plane.submit(QUEUE, [SubmitRequest(payload=body["raw"])])
    elif isinstance(body, dict) and "timeout_s" in body:
        inv = q.submit(dls.thunk(fault_jobs.work, case), timeout_s=body["timeout_s"])
    else:
        inv = q.submit(body)

    row = ended(plane, inv)

    assert (row.state, row.attempt) == (state, 1), row.error
    assert says.lower() in (row.error or "").lower()
    ok = q.submit({"op": "echo"})
    assert ended(plane, ok).state == "succeeded"
    assert daemon.proc.poll() is None, daemon.log_tail()
    assert not daemon.find("worker.task_crashed"), daemon.log_tail()


@pytest.mark.parametrize("timeout_s", [math.nan, math.inf, -1.0, 0.0, True])
def test_a_timeout_no_daemon_could_honour_is_refused_at_submit(
    fleet: tuple[HttpDispatch, DaemonProcess], timeout_s: float
) -> None:
    plane, _ = fleet
    q = dls.SyncQueue(QUEUE, dispatch=plane)
    before = q.count("queued")

    with pytest.raises(InvalidArgument, match="timeout_s"):
        q.submit(dls.thunk(fault_jobs.work, "never"), timeout_s=timeout_s)

    assert q.count("queued") == before
