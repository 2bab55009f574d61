"""`Queue`: the async sibling that wraps a `SyncQueue` and offloads its calls to threads."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore import worker as worker_module
from dreamlake.lakeshore.errors import DispatchError


@pytest.fixture
def d() -> Iterator[dls.Dispatch]:
    with dls.Dispatch(":memory:") as plane:
        yield plane


@pytest.fixture
def worker(d: dls.Dispatch, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A worker thread serving "gpu", with a handler for plain payloads."""
    monkeypatch.setattr(worker_module, "CLAIM_WAIT_S", 0.05)  # so that stopping is quick
    stop = threading.Event()

    def handler(payload: dict[str, int]) -> Iterator[int]:
        yield from range(payload.get("frames", 0))
        return payload["seed"] * 2

    t = threading.Thread(
        target=dls.run_worker, args=(d, ["gpu"]), kwargs={"stop": stop, "handler": handler}
    )
    t.start()
    yield
    stop.set()
    t.join(timeout=10)
    assert not t.is_alive()


def test_queue_is_not_a_syncqueue_and_exposes_its_sibling(d: dls.Dispatch) -> None:
    q = dls.Queue("gpu", dispatch=d, kind="boltzmann", temperature=2.0)

    assert not isinstance(q, dls.SyncQueue)
    assert isinstance(q.sync, dls.SyncQueue)
    assert (q.name, q.sync.kind, q.sync.temperature, q.sync.dispatch) == (
        "gpu",
        "boltzmann",
        2.0,
        d,
    )


def test_queue_forwards_constructor_checks(d: dls.Dispatch) -> None:
    with pytest.raises(DispatchError, match="unknown queue kind 'lifo'"):
        dls.Queue("gpu", dispatch=d, kind="lifo")


def test_submit_result_and_stream_are_awaitable(d: dls.Dispatch, worker: None) -> None:
    q = dls.Queue("gpu", dispatch=d)

    async def main() -> tuple[object, list[int]]:
        inv = await q.submit({"seed": 21, "frames": 3})
        value = await q.result(inv, timeout=10)
        frames = [frame async for frame in q.stream(inv, timeout=10)]
        return value, frames

    assert asyncio.run(main()) == (42, [0, 1, 2])


def test_call_and_count(d: dls.Dispatch, worker: None) -> None:
    q = dls.Queue("gpu", dispatch=d)

    async def main() -> tuple[object, int]:
        answer = await q.call({"seed": 5}, timeout=10.0)
        return answer, await q.count("succeeded")

    assert asyncio.run(main()) == (10, 1)


def test_fan_out_with_gather(d: dls.Dispatch, worker: None) -> None:
    q = dls.Queue("gpu", dispatch=d)

    async def main() -> list[int]:
        ids = [await q.submit({"seed": i}) for i in range(100)]
        return await asyncio.gather(*(q.result(i, timeout=300) for i in ids))

    assert asyncio.run(main()) == [2 * i for i in range(100)]


def test_slow_results_do_not_stall_the_event_loop(d: dls.Dispatch) -> None:
    q = dls.Queue("gpu", dispatch=d)

    async def main() -> int:
        inv = await q.submit({"seed": 1})
        waiting = asyncio.create_task(q.result(inv, timeout=0.5))
        ticks = 0
        while not waiting.done():
            await asyncio.sleep(0.01)
            ticks += 1
        with pytest.raises(TimeoutError):
            waiting.result()
        return ticks

    assert asyncio.run(main()) >= 10


def test_worker_verbs_and_cancel(d: dls.Dispatch) -> None:
    q = dls.Queue("gpu", dispatch=d)

    async def main() -> None:
        keep = await q.submit({"seed": 1}, key="keep")
        drop = await q.submit({"seed": 2})
        assert await q.cancel(drop) is True
        job = await q.claim()
        assert job is not None and job.id == keep and job.payload == {"seed": 1}
        assert await q.cancel(keep) is False
        await q.ack(job, "done")
        assert await q.result(keep) == "done"

        again = await q.submit({"seed": 3})
        job = await q.claim(wait=1.0)
        assert job is not None and job.id == again
        await q.nack(job, error="nope", retry=False)
        with pytest.raises(DispatchError, match="nope"):
            await q.result(again)
        assert await q.claim() is None

    asyncio.run(main())


def test_submit_many_and_topic(d: dls.Dispatch) -> None:
    q = dls.Queue("gpu", dispatch=d)

    async def main() -> list[str]:
        return await q.submit_many([1, 2, 3])

    ids = asyncio.run(main())
    assert len(ids) == 3 and q.sync.count() == 3
    t = q.topic("progress")
    assert isinstance(t, dls.Topic)
    t.post("x")
    assert q.sync.topic("progress").listen(timeout=1) == "x"


def test_async_stream_raises_on_error_and_can_stop_early(d: dls.Dispatch) -> None:
    q = dls.Queue("gpu", dispatch=d)

    async def main() -> list[object]:
        inv = await q.submit(None)
        job = await q.claim()
        assert job is not None
        for i in range(3):
            q.sync.post(job.id, i)
        first = []
        async for value in q.stream(inv, timeout=5):
            first.append(value)
            break
        await q.nack(job, error="boom", retry=False)
        with pytest.raises(DispatchError, match="boom"):
            async for value in q.stream(inv, since=0, timeout=5):
                first.append(value)
        return first

    assert asyncio.run(main()) == [0, 1, 2]
