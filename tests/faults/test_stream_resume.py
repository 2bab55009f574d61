"""A stream outlives a control plane restart: it resumes from the last seq, nothing repeated.

The server is killed with -9 while a daemon is posting frames and a producer is reading them, then
started again on the same port and store. The daemon's posts and the producer's reads meet a
refused connection meanwhile; the producer's `stream()` must carry on from the last frame it
read, within its own timeout, and end with the job, every frame once and in order.
"""

from __future__ import annotations

import threading
from pathlib import Path

import fault_jobs
import pytest
from procs import DaemonProcess, ServerProcess

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane import HttpDispatch

pytestmark = pytest.mark.slow

FRAMES = 20


def test_a_stream_resumes_across_a_server_restart(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "server", str(tmp_path / "plane.db")).start()
    daemon = DaemonProcess(
        tmp_path / "daemons", "sr-1", ["-q", "sr"], url=server.url, token=server.token
    ).ready()
    try:
        with HttpDispatch(server.url, token=server.token, timeout_s=5) as plane:
            q = dls.SyncQueue("sr", dispatch=plane)
            inv = q.submit(dls.thunk(fault_jobs.paced, FRAMES, 0.1))
            seen = []
            restart = threading.Thread(target=server.start)  # same port, same store
            for value in q.stream(inv, timeout=30):
                seen.append(value)
                if len(seen) == 3:
                    server.kill9()
                    # The next reads meet a refused connection until the restart is up.
                    restart.start()
            restart.join()

            assert seen == list(range(FRAMES))
            assert q.result(inv, timeout=30) == FRAMES
            assert server.starts == 2
    finally:
        daemon.stop()
        server.stop()
