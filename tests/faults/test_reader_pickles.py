"""Readers never unpickle what another party wrote unless they opted in.

A result is written by whichever worker held the lease, a frame by the job, a topic value by
anyone with the namespace's token: each may be a pickle whose unpickling runs its writer's code in
the reader. The payload here is a booby trap (unpickling it writes a marker file); it is wrapped
in the codec's thunk ext type, so a reader that unpickles before it type-checks runs it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import fault_jobs
import msgpack
import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.codec import EXT_THUNK
from dreamlake.lakeshore.errors import DecodeError
from tests.support import claiming


@pytest.fixture
def plane() -> Iterator[dls.Dispatch]:
    with dls.Dispatch(":memory:") as plane:
        yield plane


def trap(marker: Path) -> bytes:
    """Codec bytes of a 'thunk' whose unpickling writes `marker`."""
    inner = cloudpickle.dumps(fault_jobs.Booby(str(marker)))
    return msgpack.packb(msgpack.ExtType(EXT_THUNK, inner))  # type: ignore[no-any-return]


def acked_with(plane: dls.Dispatch, q: dls.SyncQueue, result: bytes) -> str:
    """A job whose worker (a hostile one) acks it with `result`."""
    inv = q.submit({"x": 1})
    claim = claiming.claim(plane, [q.name], worker="hostile")
    assert claim is not None and claim.id == inv
    plane.ack(claim.id, claim.lease, result)
    return inv


def posted_with(plane: dls.Dispatch, q: dls.SyncQueue, frame: bytes, kind: str) -> str:
    inv = q.submit({"x": 1})
    claim = claiming.claim(plane, [q.name], worker="hostile")
    assert claim is not None
    plane.post(claim.id, kind, frame, lease=claim.lease)
    plane.ack(claim.id, claim.lease, dls.encode(None))
    return inv


def read_result(plane: dls.Dispatch, q: dls.SyncQueue, bad: bytes, **kw: Any) -> Any:
    return q.result(acked_with(plane, q, bad), timeout=5, **kw)


def read_call(plane: dls.Dispatch, q: dls.SyncQueue, bad: bytes, **kw: Any) -> Any:
    def hostile_worker() -> None:
        claim = claiming.claim(plane, [q.name], worker="hostile", wait_s=10)
        assert claim is not None
        plane.ack(claim.id, claim.lease, bad)

    worker = threading.Thread(target=hostile_worker)
    worker.start()
    try:
        return q.call({"x": 1}, timeout=10, **kw)
    finally:
        worker.join()


def read_stream(plane: dls.Dispatch, q: dls.SyncQueue, bad: bytes, **kw: Any) -> Any:
    return list(q.stream(posted_with(plane, q, bad, "VALUE"), timeout=5, **kw))


def read_error_frame(plane: dls.Dispatch, q: dls.SyncQueue, bad: bytes, **kw: Any) -> Any:
    return list(q.stream(posted_with(plane, q, bad, "ERROR"), timeout=5, **kw))


def read_topic_listen(plane: dls.Dispatch, q: dls.SyncQueue, bad: bytes, **kw: Any) -> Any:
    topic = q.topic("news")
    plane.post(topic.channel, "VALUE", bad)
    if kw.get("allow_pickle"):
        topic.allow_pickle = True
    return topic.listen(timeout=5)


def read_topic_stream(plane: dls.Dispatch, q: dls.SyncQueue, bad: bytes, **kw: Any) -> Any:
    topic = q.topic("feed")
    plane.post(topic.channel, "VALUE", bad)
    plane.post(topic.channel, "END", None)
    if kw.get("allow_pickle"):
        topic.allow_pickle = True
    return list(topic.stream(timeout=5))


READERS: dict[str, Callable[..., Any]] = {
    "q.result": read_result,
    "q.call": read_call,
    "q.stream": read_stream,
    "an ERROR frame": read_error_frame,
    "topic.listen": read_topic_listen,
    "topic.stream": read_topic_stream,
}


@pytest.mark.parametrize("reader", list(READERS))
def test_a_reader_refuses_a_pickle_without_running_it(
    plane: dls.Dispatch, tmp_path: Path, reader: str
) -> None:
    marker = tmp_path / "ran"
    q = dls.SyncQueue("victim", dispatch=plane)

    with pytest.raises((DecodeError, dls.DispatchError), match="refusing to unpickle"):
        READERS[reader](plane, q, trap(marker))

    assert not marker.exists(), "the reader ran a worker's pickle"


@pytest.mark.parametrize("reader", ["q.result", "q.call", "q.stream", "topic.listen"])
def test_a_reader_that_opts_in_per_call_unpickles(
    plane: dls.Dispatch, tmp_path: Path, reader: str
) -> None:
    marker = tmp_path / "ran"
    q = dls.SyncQueue("trusting", dispatch=plane)

    with pytest.raises(DecodeError, match="not a Thunk"):  # it ran, then failed the type check
        READERS[reader](plane, q, trap(marker), allow_pickle=True)

    assert marker.exists()


def test_a_queue_that_opts_in_unpickles_its_results(plane: dls.Dispatch) -> None:
    q = dls.SyncQueue("trusting", dispatch=plane)
    q.allow_pickle = True
    value = dls.thunk(max, 1, 2)

    got = q.result(acked_with(plane, q, dls.encode(value)), timeout=5)

    assert isinstance(got, dls.Thunk)
    with pytest.raises(DecodeError):
        dls.SyncQueue("other", dispatch=plane).result(
            acked_with(plane, dls.SyncQueue("other", dispatch=plane), dls.encode(value)), timeout=5
        )
