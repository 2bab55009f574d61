"""Every example on the SDK "Queue API" page, run as written.

Each runs twice: on `Dispatch(":memory:")` passed as `dispatch=`, and on the process default
plane (the SQLite plane under a temporary LAKESHORE_HOME), where the page writes `SyncQueue("gpu")`
with no plane at all. Plain payloads need a worker that knows what to do with them; `serving`
starts one in a thread with a small handler (a generator, so each job also streams one frame).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore import Queue, SyncQueue
from dreamlake.lakeshore import worker as worker_module
from dreamlake.lakeshore.errors import DispatchError
from dreamlake.lakeshore.plane import reset_default_plane

Make = Callable[..., Any]


def handle(payload: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield {"manifest": payload}
    if "prompt" in payload:
        return f"hi: {payload['prompt']}"
    if "seed" in payload:
        return payload["seed"] * 2
    return {"x": payload.get("x", 0) + 1}


@pytest.fixture(params=["memory", "default"])
def make(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Make]:
    """`make(SyncQueue, "gpu")`: the page's constructor call, on the plane under test."""
    monkeypatch.setattr(worker_module, "CLAIM_WAIT_S", 0.05)
    if request.param == "memory":
        with dls.Dispatch(":memory:") as d:
            yield lambda cls, name, **kw: cls(name, dispatch=d, **kw)
        return
    monkeypatch.setenv("LAKESHORE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LAKESHORE_URL", raising=False)
    reset_default_plane()
    yield lambda cls, name, **kw: cls(name, **kw)
    reset_default_plane()


@contextlib.contextmanager
def serving(q: SyncQueue | Queue) -> Iterator[None]:
    stop = threading.Event()
    t = threading.Thread(target=dls.run_worker, args=(q,), kwargs={"stop": stop, "handler": handle})
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(timeout=10)
    assert not t.is_alive()


def test_the_imports() -> None:
    import dreamlake.lakeshore as dls2
    from dreamlake.lakeshore import Queue as AsyncQueue
    from dreamlake.lakeshore import SyncQueue as BlockingQueue

    assert dls2.Queue is AsyncQueue and dls2.SyncQueue is BlockingQueue
    assert not issubclass(AsyncQueue, BlockingQueue)


def test_the_blocking_surface(make: Make) -> None:
    q = make(SyncQueue, "gpu")  # blocking surface
    with serving(q):
        inv = q.submit({"x": 1}, key="scene7/x")  # -> durable string id
        val = q.result(inv, timeout=60.0)

    assert isinstance(inv, str)
    assert val == {"x": 2}


def test_the_async_surface(make: Make) -> None:
    q = make(Queue, "gpu")  # async surface

    async def main() -> tuple[Any, list[Any]]:
        inv = await q.submit({"x": 1})
        val = await q.result(inv)
        frames = []
        async for frame in q.stream(inv):
            frames.append(frame)
        return val, frames

    with serving(q):
        val, frames = asyncio.run(main())

    assert val == {"x": 2}
    assert frames == [{"manifest": {"x": 1}}]


def test_payloads_round_trip_through_the_codec(make: Make) -> None:
    np = pytest.importorskip("numpy")
    q = make(SyncQueue, "gpu")
    payload = {"array": np.arange(6, dtype=np.float32).reshape(2, 3), "pair": (1, "a")}

    q.submit(payload)

    job = q.claim()
    assert job is not None
    assert job.payload["pair"] == (1, "a")
    assert job.payload["array"].dtype == np.float32
    assert (job.payload["array"] == payload["array"]).all()


def test_the_constructor_signature() -> None:
    params = inspect.signature(SyncQueue).parameters

    assert list(params)[:4] == ["name", "dispatch", "kind", "temperature"]
    assert params["dispatch"].default is None
    assert params["kind"].default == "fifo"
    assert params["temperature"].default == 1.0
    assert all(params[p].kind is inspect.Parameter.KEYWORD_ONLY for p in list(params)[1:4])


@pytest.mark.parametrize("kind", ["fifo", "priority", "filo", "boltzmann"])
def test_the_kinds(make: Make, kind: str) -> None:
    q = make(SyncQueue, "gpu", kind=kind, temperature=1.0)
    q.submit("low", priority=0.0)
    q.submit("high", priority=9.0)

    job = q.claim()

    assert job is not None
    if kind != "boltzmann":
        assert job.payload == "high"


def test_anything_else_raises(make: Make) -> None:
    with pytest.raises(DispatchError) as err:
        make(SyncQueue, "gpu", kind="lifo")

    assert str(err.value) == "unknown queue kind 'lifo'; use fifo|filo|boltzmann"


def test_the_submit_variants(make: Make) -> None:
    q = make(SyncQueue, "gpu")

    with serving(q):
        inv = q.submit({"seed": 42})
        assert q.result(inv) == 84
        inv = q.submit({"seed": 42}, key="sweep/42")  # idempotent per queue
        assert q.submit({"seed": 42}, key="sweep/42") == inv
        inv = q.submit({"seed": 42}, priority=9.0)
        assert q.result(inv) == 84
        inv = q.submit(dls.thunk(lambda: 40 + 2))  # ad-hoc callable, by value
        assert q.result(inv) == 42


def test_call(make: Make) -> None:
    q = make(SyncQueue, "gpu")

    with serving(q):
        answer = q.call({"prompt": "hello"}, timeout=10.0)

    assert answer == "hi: hello"


def test_stream_sync_and_async(make: Make) -> None:
    q = make(SyncQueue, "gpu")
    aq = make(Queue, "gpu")
    with serving(q):
        inv = q.submit({"seed": 1})
        seen = []
        for manifest in q.stream(inv):  # SyncQueue -> Iterator
            seen.append(manifest)

        async def main() -> None:
            async for manifest in aq.stream(inv):  # Queue -> AsyncIterator
                seen.append(manifest)

        asyncio.run(main())

    assert seen == [{"manifest": {"seed": 1}}] * 2


def test_cancel_count_and_len(make: Make) -> None:
    q = make(SyncQueue, "gpu")
    inv = q.submit({"x": 1})
    q.submit({"x": 2})

    assert q.cancel(inv) is True
    assert q.count("cancelled") == 1
    assert len(q) == q.count() == 1
    for state in ("queued", "running", "succeeded", "failed", "cancelled"):
        assert isinstance(q.count(state), int)


def test_claim_and_the_job_dataclass(make: Make) -> None:
    q = make(SyncQueue, "gpu")
    assert q.claim() is None
    inv = q.submit({"x": 1})

    job = q.claim()

    assert dataclasses.is_dataclass(job)
    fields = [f.name for f in dataclasses.fields(dls.Job)]
    assert fields[:4] == ["id", "payload", "attempt", "queue"]
    assert job is not None and (job.id, job.payload, job.attempt, job.queue) == (
        inv,
        {"x": 1},
        1,
        "gpu",
    )


def test_ack_and_nack(make: Make) -> None:
    q = make(SyncQueue, "gpu")
    ok, bad = q.submit(1), q.submit(2)

    job = q.claim()
    q.ack(job, result=None)
    job2 = q.claim()
    q.nack(job2, error="bad input", retry=False)

    assert q.result(ok) is None
    with pytest.raises(DispatchError, match="bad input"):
        q.result(bad)
    with pytest.raises(DispatchError):  # settling a job you do not hold
        q.ack(job2)


def test_working(make: Make) -> None:
    q = make(SyncQueue, "gpu")
    inv = q.submit({"x": 1})
    handled = []

    def handle_payload(payload: Any) -> None:
        handled.append(payload)

    with q.working() as job:
        if job is not None:
            handle_payload(job.payload)

    assert handled == [{"x": 1}]
    assert q.count("succeeded") == 1 and q.status(inv).state == "succeeded"
    with q.working() as job:
        assert job is None


def test_post(make: Make) -> None:
    q = make(SyncQueue, "gpu")
    inv = q.submit({"x": 1})
    job = q.claim()

    assert q.post(inv, {"progress": 0.5}) == 0
    assert q.post(inv, None, final=True) == 1
    q.ack(job, "done")

    assert list(q.stream(inv)) == [{"progress": 0.5}]


def test_topic(make: Make) -> None:
    q = make(SyncQueue, "gpu")
    t = q.topic("progress")  # q.topic() auto-names it "topic-"
    assert q.topic().name.startswith("topic-")

    assert t.post({"step": 1}) == 0  # -> seq
    assert t.post(None, final=True) == 1  # END frame closes the topic

    assert t.listen(since=-1, timeout=5.0) == {"step": 1}
    values = []
    for v in t.stream(since=-1, timeout=5.0):  # values until END
        values.append(v)
    assert values == [{"step": 1}]


def test_queue_vs_syncqueue_table(make: Make) -> None:
    q = make(Queue, "gpu")

    for verb in ("submit", "result", "call", "stream", "cancel", "count", "claim", "ack", "nack"):
        method = getattr(q, verb)
        assert inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method), verb
    for verb in ("working", "post", "__len__"):
        assert hasattr(q.sync, verb)
    assert isinstance(q.topic("progress"), dls.Topic)
    assert q.topic("progress").channel == q.sync.topic("progress").channel


def test_fan_out_composes_with_asyncio_gather(make: Make) -> None:
    q = make(Queue, "gpu")

    async def main() -> list[Any]:
        ids = [await q.submit({"seed": i}) for i in range(100)]
        results = await asyncio.gather(*(q.result(i, timeout=300) for i in ids))
        return results

    with serving(q):
        results = asyncio.run(main())

    assert results == [2 * i for i in range(100)]


# -- the task-queue page ----------------------------------------------------------------------


def test_the_whole_plane_in_one_process() -> None:
    q = dls.Dispatch(":memory:")  # a full plane, in-process
    try:
        inv = SyncQueue("default", dispatch=q).submit(dls.thunk(lambda: "ran"))
        assert dls.run_worker(q, once=True) == 1  # drain exactly one job and return
        assert SyncQueue("default", dispatch=q).result(inv) == "ran"
    finally:
        q.close()


def test_idempotent_udf_submit(make: Make) -> None:
    q = make(SyncQueue, "gpu")
    f = dls.udf(lambda x: x + 1, queue=q)

    inv = f.submit(x=1, _key="nightly-2026-08-06")

    assert f.submit(x=1, _key="nightly-2026-08-06") == inv
    dls.run_worker(q, once=True)
    assert q.result(inv) == 2  # poll from this process, or any other, later
