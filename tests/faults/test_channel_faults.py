"""A daemon's channel (issue 48) under faults: the server's push reaches the daemon, again after
the server is killed and restarted; a proxy that cannot carry the channel leaves the daemon on
HTTP, said once; requests over the channel survive cut connections; and neither a client
without a token nor one that sends garbage gets anything from it."""

from __future__ import annotations

import random
from pathlib import Path

import fault_jobs
import msgpack
import pytest
from procs import DaemonProcess, ServerProcess, wait_until
from proxy import ChaosProxy
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane import HttpDispatch

pytestmark = pytest.mark.slow


def _kill_running(q: dls.SyncQueue, folder: Path) -> str:
    """Start a job that runs until killed, kill it, and return its id once it is `killed`."""
    folder.mkdir()
    inv = q.submit(dls.thunk(fault_jobs.work, "long", 120.0, str(folder)))
    wait_until(lambda: any(folder.iterdir()), timeout=60, what="the job running")
    q.cancel(inv, kill=True)
    row = q.dispatch.invocation(inv, wait_s=30)
    assert row.state == "killed", (row.state, row.error)
    return inv


def test_a_kill_is_pushed_over_the_channel_and_again_after_the_server_restarts(
    tmp_path: Path,
) -> None:
    srv = ServerProcess(tmp_path / "server").start()
    daemon = DaemonProcess(tmp_path / "d", "d1", ["-q", "ch"], url=srv.url, token=srv.token)
    producer = HttpDispatch(srv.url, token=srv.token)
    try:
        daemon.ready()
        q = dls.SyncQueue("ch", dispatch=producer)
        wait_until(lambda: daemon.find("channel.opened"), timeout=30, what="the channel open")
        first = _kill_running(q, tmp_path / "first")
        # the push came before the kill was seen (a renewal a second later would see it too)
        events = [e["event"] for e in daemon.events()]
        assert events.index("worker.pushed") < events.index("job.kill_requested")
        assert daemon.find("job.kill_requested", invocation=first)

        srv.kill9()
        srv.start()  # the same port and store: the daemon reopens its channel
        wait_until(
            lambda: len(daemon.find_all("channel.opened")) == 2,
            timeout=60,
            what="the channel reopened",
        )
        _kill_running(q, tmp_path / "second")
        assert len(daemon.find_all("worker.pushed")) == 2
        assert q.call(dls.thunk(fault_jobs.work, "after"), timeout=60)["tag"] == "after"
    finally:
        daemon.stop()
        producer.close()
        srv.stop()


def test_a_proxy_that_cannot_carry_the_channel_leaves_the_daemon_on_http(
    tmp_path: Path, rng: random.Random
) -> None:
    srv = ServerProcess(tmp_path / "server").start()
    proxy = ChaosProxy(srv.port, rng).__enter__()
    proxy.set(refuse_upgrade=True)
    daemon = DaemonProcess(tmp_path / "d", "d1", ["-q", "ch"], url=proxy.url, token=srv.token)
    producer = HttpDispatch(srv.url, token=srv.token)
    try:
        daemon.ready()
        q = dls.SyncQueue("ch", dispatch=producer)
        results = [q.call(dls.thunk(fault_jobs.work, f"t{i}"), timeout=60) for i in range(5)]
        assert [r["tag"] for r in results] == [f"t{i}" for i in range(5)]
        _kill_running(q, tmp_path / "killed")  # learnt at a renewal: no channel, no push
        [refused] = daemon.find_all("channel.refused")
        assert "HTTP 502" in refused["why"]
        assert not daemon.find("channel.opened") and not daemon.find("worker.pushed")
    finally:
        daemon.stop()
        producer.close()
        proxy.close()
        srv.stop()


def test_requests_over_the_channel_survive_cut_connections(
    tmp_path: Path, rng: random.Random
) -> None:
    srv = ServerProcess(tmp_path / "server").start()
    proxy = ChaosProxy(srv.port, rng).__enter__()
    daemon = DaemonProcess(
        tmp_path / "d",
        "d1",
        ["-q", "ch", "-c", "2"],
        url=proxy.url,
        token=srv.token,
        env={"LAKESHORE_CHANNEL": "requests"},
    )
    producer = HttpDispatch(srv.url, token=srv.token)
    try:
        daemon.ready()
        q = dls.SyncQueue("ch", dispatch=producer)
        wait_until(lambda: daemon.find("channel.opened"), timeout=30, what="the channel open")
        jobs = [q.submit(dls.thunk(fault_jobs.work, f"j{i}", 0.05)) for i in range(40)]
        for _ in range(3):
            wait_until(
                lambda: sum(producer.invocation(j).terminal for j in jobs) >= 5,
                timeout=60,
                what="some jobs done",
            )
            proxy.cut_all()
        assert [q.result(j, timeout=120)["tag"] for j in jobs] == [f"j{i}" for i in range(40)]
        assert len(daemon.find_all("channel.opened")) >= 2  # reopened after a cut
    finally:
        daemon.stop()
        producer.close()
        proxy.close()
        srv.stop()


def test_the_channel_refuses_a_missing_token_and_garbage_changes_nothing(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "server").start()
    url = srv.url.replace("http:", "ws:") + "/v1/channel"
    auth = {"authorization": f"Bearer {srv.token}"}
    try:
        with pytest.raises(InvalidStatus) as refused:
            connect(url, proxy=None).close()
        assert refused.value.response.status_code == 403
        for garbage in (
            b"\xc1not msgpack",
            msgpack.packb({"n": 1}),
            msgpack.packb([1, "BREW", "/", None]),
        ):
            with connect(url, additional_headers=auth, proxy=None) as ws:
                ws.send(garbage)
                with pytest.raises(ConnectionClosed) as closed:
                    ws.recv(timeout=10)
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 1003
        with connect(url, additional_headers=auth, proxy=None) as ws:
            # a request the route refuses is answered in the channel, as HTTP would answer it
            ws.send(msgpack.packb([7, "GET", "/v1/namespaces/default/invocations/nope", None]))
            n, status, _, _ = msgpack.unpackb(ws.recv(timeout=10))
            assert (n, status) == (7, 404)
        with HttpDispatch(srv.url, token=srv.token) as plane:
            assert plane.count("anything") == 0  # the server serves on
    finally:
        srv.stop()
