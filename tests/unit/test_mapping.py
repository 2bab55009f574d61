"""`map` / `starmap` (issue 36, item 1) on the in-memory plane with a worker thread.

The real-process runs (two daemons, an interrupted producer, a million inputs) are in
tests/e2e/test_map_daemons.py; here the contract: order, chunks, failures with their index,
laziness, and the cancel of what is still queued when the consumer stops early.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.mapping import ERROR_MARK, MapItemError, chunk_outcomes
from dreamlake.lakeshore.worker import run_worker


def square(x: int) -> int:
    if x == 7:
        raise ValueError("seven is refused")
    return x * x


def double(x: int) -> int:
    return 2 * x


def add(a: int, b: int) -> int:
    return a + b


@pytest.fixture
def plane() -> Iterator[dls.Dispatch]:
    with dls.Dispatch(":memory:") as plane:
        yield plane


@pytest.fixture
def q(plane: dls.Dispatch) -> Iterator[dls.SyncQueue]:
    q = dls.SyncQueue("maps", dispatch=plane)
    stop = threading.Event()
    worker = threading.Thread(target=run_worker, args=(q,), kwargs={"stop": stop}, daemon=True)
    worker.start()
    yield q
    stop.set()
    worker.join(timeout=30)


def test_map_returns_results_in_input_order(q: dls.SyncQueue) -> None:
    assert list(q.map(square, range(7))) == [x * x for x in range(7)]


def test_chunks_return_the_same_results_in_fewer_jobs(q: dls.SyncQueue) -> None:
    results = q.map(square, range(8, 108), chunk_size=30)
    assert list(results) == [x * x for x in range(8, 108)]
    assert len(q.dispatch.invocations(map_id=results.id)) == 4  # 30 + 30 + 30 + 10


def test_unordered_map_yields_every_result(q: dls.SyncQueue) -> None:
    assert sorted(q.map(double, range(50), ordered=False)) == [2 * x for x in range(50)]


def test_starmap_spreads_each_tuple_over_the_arguments(q: dls.SyncQueue) -> None:
    assert list(q.starmap(add, [(1, 2), (3, 4)])) == [3, 7]
    assert list(q.starmap(add, [(1, 2), (3, 4)], chunk_size=2)) == [3, 7]


def test_a_udf_maps_over_its_own_queue(q: dls.SyncQueue) -> None:
    f = dls.udf(add, queue=q)
    assert list(f.starmap([(1, 1), (2, 2)])) == [2, 4]
    g = dls.udf(square, queue=q)
    assert list(g.map([2, 3], chunk_size=5)) == [4, 9]


@pytest.mark.parametrize("chunk_size", [None, 3])
def test_the_first_failure_raises_with_its_input_index(
    q: dls.SyncQueue, chunk_size: int | None
) -> None:
    results = q.map(square, range(10), chunk_size=chunk_size, max_attempts=1)
    seen = []
    with pytest.raises(MapItemError, match=r"(?s)map item 7 .*seven is refused") as caught:
        for value in results:
            seen.append(value)
    assert caught.value.index == 7
    assert seen == [x * x for x in range(7)]


@pytest.mark.parametrize("chunk_size", [None, 4])
def test_return_exceptions_puts_the_error_in_its_place(
    q: dls.SyncQueue, chunk_size: int | None
) -> None:
    out = list(
        q.map(square, range(9), chunk_size=chunk_size, return_exceptions=True, max_attempts=1)
    )
    assert isinstance(out[7], MapItemError) and out[7].index == 7
    assert out[:7] + out[8:] == [x * x for x in range(9) if x != 7]


def test_stopping_early_cancels_what_is_still_queued(plane: dls.Dispatch) -> None:
    """Given one worker that runs 3 jobs and stops, when the consumer closes the map after
    those 3, then every other job of the map is cancelled, and the inputs were read lazily."""
    q = dls.SyncQueue("early", dispatch=plane)
    read = []

    def inputs() -> Iterator[int]:
        for i in range(10_000):
            read.append(i)
            yield i

    worker = threading.Thread(target=run_worker, args=(q,), kwargs={"max_jobs": 3}, daemon=True)
    worker.start()
    results = q.map(square, inputs(), window=10, max_in_flight=20)
    assert [next(results) for _ in range(3)] == [0, 1, 4]
    results.close()
    worker.join(timeout=30)
    rows = plane.invocations(map_id=results.id, limit=1000)
    states = sorted(r.state for r in rows)
    assert states.count("succeeded") == 3
    assert states.count("cancelled") == len(rows) - 3
    assert len(read) <= 30  # never the whole input: the window in flight, and one more
    assert plane.count("early", "queued") == 0


def test_async_map_wraps_the_blocking_one(q: dls.SyncQueue) -> None:
    aq = dls.Queue("maps").bind(q.dispatch)

    async def main() -> list[int]:
        return [v async for v in aq.map(square, range(5), chunk_size=2)]

    assert asyncio.run(main()) == [0, 1, 4, 9, 16]


def test_map_refuses_a_bad_chunk_size(q: dls.SyncQueue) -> None:
    with pytest.raises(InvalidArgument, match="chunk_size must be a positive integer"):
        q.map(square, [1], chunk_size=0)


def test_jobs_ls_lists_a_maps_jobs(q: dls.SyncQueue) -> None:
    results = q.map(square, range(3))
    assert list(results) == [0, 1, 4]
    rows = q.dispatch.invocations(map_id=results.id)
    assert len(rows) == 3 and {r.queue for r in rows} == {"maps"}
    with pytest.raises(InvalidArgument, match="takes no queue or state filter"):
        q.dispatch.invocations(map_id=results.id, state="queued")


def looks_like_an_error(x: int) -> dict[str, str]:
    return {ERROR_MARK: f"just a value {x}"}


def test_a_value_shaped_like_an_error_marker_stays_a_value(q: dls.SyncQueue) -> None:
    """A chunk's errors travel beside its values: a function whose result happens to look
    like the old in-place marker is not misread as a failed item."""
    got = list(q.map(looks_like_an_error, range(3), chunk_size=3, max_attempts=1))
    assert got == [{ERROR_MARK: f"just a value {x}"} for x in range(3)]


def test_a_chunk_from_an_earlier_daemon_is_still_read() -> None:
    """A daemon of the previous release returns a list with markers in place of errors."""
    old = [4, {ERROR_MARK: "ValueError: no"}, 9]
    out = chunk_outcomes(old, 10, "inv")
    assert out[0] == 4 and out[2] == 9
    assert isinstance(out[1], MapItemError) and out[1].index == 11
