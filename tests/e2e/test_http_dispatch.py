"""`HttpDispatch` end to end: the SDK's verbs against a real server, same records, same errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import (
    Conflict,
    DispatchError,
    Forbidden,
    InvalidArgument,
    LeaseLost,
    NotFound,
    QueueFullError,
    Unauthorized,
)
from dreamlake.lakeshore.plane import HttpDispatch, Plane
from dreamlake.lakeshore.types import Claim, Invocation, QueueInfo, SubmitRequest, WorkerInfo
from tests.support import claiming


def test_is_a_plane(http_plane):
    assert isinstance(http_plane(), Plane)


def test_submit_claim_ack_result(http_plane):
    plane = http_plane()
    q = dls.SyncQueue("jobs", dispatch=plane)
    inv = q.submit({"x": 1, "t": (1, 2)})
    job = q.claim()
    assert job is not None and job.payload == {"x": 1, "t": (1, 2)}
    q.ack(job, {"ok": True})
    assert q.result(inv, timeout=10) == {"ok": True}
    row = plane.invocation(inv)
    assert isinstance(row, Invocation) and row.state == "succeeded" and row.attempt == 1


def test_call_with_worker_thread(http_plane):
    plane = http_plane()
    q = dls.SyncQueue("calls", dispatch=plane)
    stop = threading.Event()
    worker_plane = http_plane(namespace=plane.namespace)
    # the worker runs thunks; `handler` turns a raw payload into a result
    thread = threading.Thread(
        target=dls.run_worker,
        args=(worker_plane, ["calls"]),
        kwargs={"stop": stop, "handler": lambda payload: payload * 2},
    )
    thread.start()
    try:
        assert [q.call(i, timeout=10) for i in range(5)] == [0, 2, 4, 6, 8]
    finally:
        stop.set()
        thread.join(timeout=10)


def test_failed_job_raises_dispatch_error(http_plane):
    plane = http_plane()
    q = dls.SyncQueue("fails", dispatch=plane)
    inv = q.submit("x", max_attempts=1)
    job = q.claim()
    assert job is not None
    q.nack(job, error="boom", retry=False)
    with pytest.raises(DispatchError, match="boom"):
        q.result(inv, timeout=5)


def test_result_timeout(http_plane):
    q = dls.SyncQueue("slow", dispatch=http_plane())
    inv = q.submit(1)
    with pytest.raises(TimeoutError):
        q.result(inv, timeout=0.2)


def test_stream_frames_across_the_wire(http_plane):
    plane = http_plane()
    q = dls.SyncQueue("gen", dispatch=plane)
    inv = q.submit(None)
    job = q.claim()
    assert job is not None
    for i in range(3):
        q.post(job.id, {"i": i})
    q.ack(job, "done")
    assert list(q.stream(inv, timeout=10)) == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert list(q.stream(inv, since=1, timeout=10)) == [{"i": 2}]
    frames = plane.frames(inv, since=-1)
    assert [f.seq for f in frames] == [0, 1, 2]


def test_stream_ends_when_job_fails_without_frames(http_plane):
    q = dls.SyncQueue("genfail", dispatch=http_plane())
    inv = q.submit(None, max_attempts=1)
    job = q.claim()
    assert job is not None
    q.nack(job, error="nope", retry=False)
    with pytest.raises(DispatchError):
        list(q.stream(inv, timeout=10))


def test_topics(http_plane):
    plane = http_plane()
    q = dls.SyncQueue("pub", dispatch=plane)
    topic = q.topic("news")
    assert topic.channel == f"topic:{plane.namespace}/pub/news"
    topic.post("a")
    topic.post("b")
    topic.post(final=True)
    assert list(topic.stream(timeout=5)) == ["a", "b"]
    assert topic.listen(since=0, timeout=1) == "b"


def test_cancel_and_count(http_plane):
    plane = http_plane()
    q = dls.SyncQueue("cc", dispatch=plane)
    a, b = q.submit(1), q.submit(2)
    assert q.count() == 2
    assert q.cancel(a) is True
    assert q.count("cancelled") == 1 and q.count() == 1
    job = q.claim()
    assert job is not None and job.id == b
    assert q.cancel(b) is False
    assert q.cancel(b, kill=True) is True
    assert plane.renew([job.lease], 30) == {b: True}
    with pytest.raises(DispatchError):
        q.count("nonsense")


def test_claim_long_poll_wakes_on_submit(http_plane):
    plane = http_plane()
    got: list[Claim | None] = []
    thread = threading.Thread(
        target=lambda: got.append(claiming.claim(plane, ["lp"], worker="w", wait_s=30))
    )
    thread.start()
    producer = http_plane(namespace=plane.namespace)
    inv = producer.submit("lp", [SubmitRequest(payload=dls.encode(1))])[0]
    thread.join(timeout=30)
    assert got and got[0] is not None and got[0].id == inv


def test_settle_verbs_and_stale_lease(http_plane):
    plane = http_plane()
    ids = plane.submit("s", [SubmitRequest(payload=b"\x01") for _ in range(3)])
    c1 = claiming.claim(plane, ["s"], worker="w")
    assert c1 is not None and c1.id == ids[0]
    with pytest.raises(LeaseLost):
        plane.ack(c1.id, "stale", None)
    plane.ack(c1.id, c1.lease, b"\xc0")
    plane.ack(c1.id, c1.lease, b"\xc0")  # the same settle again is idempotent
    c2 = claiming.claim(plane, ["s"], worker="w")
    assert c2 is not None
    assert plane.release(c2.id, c2.lease) is True
    c2 = claiming.claim(plane, ["s"], worker="w")
    assert c2 is not None
    assert plane.nack(c2.id, c2.lease, error="e", retry=True) == "queued"
    c3 = claiming.claim(plane, ["s"], worker="w")
    assert c3 is not None
    plane.end(c3.id, c3.lease, state="timeout", error="too slow")
    assert plane.invocation(c3.id).state == "timeout"
    with pytest.raises(InvalidArgument):
        plane.end(c3.id, c3.lease, state="bogus", error="")


def test_queue_admin_verbs(http_plane):
    plane = http_plane()
    info = plane.create_queue("adm", kind="filo", description="d", admission={"max_depth": 1})
    assert isinstance(info, QueueInfo) and info.kind == "filo"
    with pytest.raises(Conflict):
        plane.create_queue("adm")
    assert {q.name for q in plane.queues()} == {"adm", "default"}
    assert plane.patch_queue("adm", {"description": "e"}).description == "e"
    assert plane.set_queue_state("adm", "drain").state == "draining"
    assert [q.name for q in plane.queues(state="draining")] == ["adm"]
    plane.set_queue_state("adm", "unarchive")
    plane.submit("adm", [SubmitRequest(payload=b"1")])
    with pytest.raises(QueueFullError):
        plane.submit("adm", [SubmitRequest(payload=b"2")])
    assert [e["kind"] for e in plane.events("adm", limit=2)] == ["unarchived", "drained"]
    assert plane.stats("adm")["pending"] == 1
    plane.delete_queue("adm")
    with pytest.raises(NotFound):
        plane.queue("adm")
    with pytest.raises(Conflict):
        plane.delete_queue("default")


def test_blocking_submit_waits_for_room(http_plane):
    plane = http_plane()
    plane.create_queue("blk", admission={"max_depth": 1, "on_full": "block"})
    plane.submit("blk", [SubmitRequest(payload=b"1")])
    with pytest.raises(QueueFullError) as info:
        plane.submit("blk", [SubmitRequest(payload=b"2")])
    assert info.value.block is True
    got: list[list[str]] = []
    thread = threading.Thread(
        target=lambda: got.append(plane.submit("blk", [SubmitRequest(payload=b"3")], wait_s=30))
    )
    thread.start()
    assert claiming.claim(plane, ["blk"], worker="w") is not None
    thread.join(timeout=30)
    assert got and len(got[0]) == 1


def test_worker_rows(http_plane):
    plane = http_plane()
    w = plane.register_worker("box-1", queues=["a"], host="h", pid=7, info={"concurrency": 2})
    assert isinstance(w, WorkerInfo) and w.queues == ["a"]
    assert plane.heartbeat(w.id, {"cpu": 1.0}).load == {"cpu": 1.0}
    assert plane.worker("box-1").id == w.id
    assert [x.name for x in plane.workers()] == ["box-1"]
    assert plane.update_worker_queues("box-1", add=["b"], remove=["a"]).queues == ["b"]
    assert plane.set_worker_state("box-1", "draining").state == "draining"
    with pytest.raises(NotFound):
        plane.worker("nobody")


def test_auth_errors_map_to_classes(server, http_plane, make_tenant):
    with (
        HttpDispatch(server.url, token="wrong", namespace="default") as bad,
        pytest.raises(Unauthorized),
    ):
        bad.queues()
    other = make_tenant()
    with pytest.raises(Forbidden):
        http_plane(namespace=other.namespace, token=make_tenant().token).queues()
    with pytest.raises(NotFound):
        http_plane(namespace="no-such-namespace", token=other.token).queues()


def test_defaults_from_environment_and_token_file(server, monkeypatch):
    monkeypatch.setenv("LAKESHORE_URL", server.url)
    monkeypatch.setenv("LAKESHORE_HOME", str(server.home))
    monkeypatch.delenv("LAKESHORE_TOKEN", raising=False)
    monkeypatch.delenv("LAKESHORE_NAMESPACE", raising=False)
    with HttpDispatch() as plane:  # token read from $LAKESHORE_HOME/token
        assert plane.namespace == "default"
        assert any(q.name == "default" for q in plane.queues())


def test_unreachable_server_is_a_dispatch_error(tmp_path):
    from tests.support.server import free_port

    with (
        HttpDispatch(f"http://127.0.0.1:{free_port()}", token="t") as plane,
        pytest.raises(DispatchError, match="cannot reach"),
    ):
        plane.queues()


def test_async_queue_over_http(http_plane):
    import asyncio

    plane = http_plane()

    async def main() -> object:
        q = dls.Queue("aq", dispatch=plane)
        inv = await q.submit(5)
        job = await q.claim()
        assert job is not None
        await q.ack(job, job.payload + 1)
        return await q.result(inv, timeout=5)

    assert asyncio.run(main()) == 6


def test_a_producer_over_http_loads_neither_the_store_nor_httpx(server, tenant, tmp_path):
    """A script that only submits and reads over plain http opens no SQL store (no SQLite
    plane, no wake-up sockets) and no httpx: the lean HTTP/1.1 path carries it."""
    code = (
        "import json, sys\n"
        "import dreamlake.lakeshore as dls\n"
        "q = dls.SyncQueue('imports')\n"
        "inv = q.submit({'x': 1})\n"
        "assert q.dispatch.invocation(inv).state == 'queued'\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env |= {
        "LAKESHORE_URL": server.url,
        "LAKESHORE_TOKEN": tenant.token,
        "LAKESHORE_NAMESPACE": tenant.namespace,
        "LAKESHORE_HOME": str(tmp_path),
    }
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr

    loaded = set(json.loads(out.stdout))

    embedded = {"httpx", *(f"dreamlake.lakeshore.plane.{m}" for m in ("store", "dispatch"))}
    assert "dreamlake.lakeshore.plane.http" in loaded
    assert not loaded & embedded, sorted(loaded & embedded)
