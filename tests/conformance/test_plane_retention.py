"""Retention on every plane: journals, then rows, of ended invocations; spills go with them.

A trimmed journal degrades a stream to the terminal result (success ends it, a failure raises),
never to a wrong state; live invocations and topics are never touched, whatever their age.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from planes import PlaneEnv

import dreamlake.lakeshore as dls
from dreamlake.lakeshore import retention, spill
from dreamlake.lakeshore.errors import DispatchError, NotFound
from dreamlake.lakeshore.storage import LocalStorage

HOUR = 3600.0


def _streamed(plane: PlaneEnv, queue: str, n: int = 3) -> str:
    """An invocation that yielded `n` VALUE frames and succeeded, run by the peer."""
    inv = plane.queue(queue).submit({"op": "stream", "n": n})
    assert plane.peer.call("run_worker", queue=queue, once=True) == 1
    assert plane.queue(queue).result(inv, timeout=10.0) == n
    return inv


def test_trimming_frames_degrades_a_stream_to_the_terminal_result(plane: PlaneEnv) -> None:
    inv = _streamed(plane, "journal")
    q = plane.queue("journal")
    assert list(q.stream(inv, timeout=5.0)) == [0, 1, 2]

    trimmed = plane.dispatch.trim_retention(frames_older_than_s=0)  # type: ignore[attr-defined]

    assert trimmed.frames >= 3 and trimmed.invocations == 0
    assert plane.dispatch.frames(inv) == []
    assert list(q.stream(inv, timeout=5.0)) == []  # ends as the row did: succeeded
    assert q.result(inv, timeout=5.0) == 3  # the row is the truth, and it is intact


def test_a_trimmed_failed_stream_still_raises(plane: PlaneEnv) -> None:
    q = plane.queue("journal")
    inv = q.submit({"op": "fail", "msg": "bad input"})
    plane.peer.call("run_worker", queue="journal", once=True)

    plane.dispatch.trim_retention(frames_older_than_s=0)  # type: ignore[attr-defined]

    assert plane.dispatch.frames(inv) == []
    with pytest.raises(DispatchError, match="failed"):
        list(q.stream(inv, timeout=5.0))


def test_recent_invocations_are_kept(plane: PlaneEnv) -> None:
    inv = _streamed(plane, "journal")

    trimmed = plane.dispatch.trim_retention(  # type: ignore[attr-defined]
        frames_older_than_s=HOUR, invocations_older_than_s=HOUR
    )

    assert (trimmed.frames, trimmed.invocations) == (0, 0)
    assert len(plane.dispatch.frames(inv)) == 3


def test_trimming_invocations_deletes_rows_and_their_journals(plane: PlaneEnv) -> None:
    done = _streamed(plane, "rows")
    cancelled = plane.queue("rows").submit(1)
    assert plane.dispatch.cancel(cancelled)

    trimmed = plane.dispatch.trim_retention(invocations_older_than_s=0)  # type: ignore[attr-defined]

    assert trimmed.invocations == 2 and trimmed.frames >= 3
    for inv in (done, cancelled):
        with pytest.raises(NotFound):
            plane.dispatch.invocation(inv)


def test_live_invocations_and_topics_are_never_trimmed(plane: PlaneEnv) -> None:
    q = plane.queue("live")
    queued = q.submit(1)
    running = q.submit(2)
    job = plane.peer.claim("live")
    assert job is not None and job.id == queued
    plane.peer.post(job, "progress")
    topic = q.topic("progress")
    topic.post({"step": 1})

    trimmed = plane.dispatch.trim_retention(  # type: ignore[attr-defined]
        frames_older_than_s=0, invocations_older_than_s=0
    )

    assert (trimmed.frames, trimmed.invocations) == (0, 0)
    assert plane.dispatch.invocation(queued).state == "running"
    assert plane.dispatch.invocation(running).state == "queued"
    assert [f.seq for f in plane.dispatch.frames(queued)] == [0]
    assert topic.listen(since=-1, timeout=1.0) == {"step": 1}
    plane.peer.ack(job, "done")
    assert q.result(queued, timeout=5.0) == "done"


@pytest.fixture
def spill_dir(tmp_path: Path) -> Iterator[LocalStorage]:
    """Spill everything above 1 KiB to a directory the peer process can read too."""
    storage = LocalStorage(tmp_path / "spill")
    spill.configure(inline_limit=1024, storage=storage)
    yield storage
    spill.configure()


def test_spilled_payloads_are_deleted_with_their_invocation(
    plane: PlaneEnv, spill_dir: LocalStorage
) -> None:
    q = plane.queue("big")
    inv = q.submit({"op": "double", "x": 21, "pad": "y" * 5000})  # spilled; the peer reads it
    assert plane.peer.call("run_worker", queue="big", once=True) == 1
    assert q.result(inv, timeout=10.0) == 42
    assert len(list(spill_dir.list("_objects/"))) == 1

    result = retention.trim(plane.dispatch, invocations_older_than_s=0)

    assert (result.invocations, result.refs_deleted, result.problems) == (1, 1, [])
    assert list(spill_dir.list("_objects/")) == []


def test_a_frames_only_trim_keeps_the_spilled_payload(
    plane: PlaneEnv, spill_dir: LocalStorage
) -> None:
    q = plane.queue("big")
    inv = q.submit({"op": "stream", "n": 2, "pad": "z" * 5000})
    plane.peer.call("run_worker", queue="big", once=True)

    result = retention.trim(plane.dispatch, frames_older_than_s=0)

    assert result.refs_deleted == 0 and len(list(spill_dir.list("_objects/"))) == 1
    assert q.result(inv, timeout=5.0) == 2


def test_a_ref_the_producer_passed_is_never_deleted(plane: PlaneEnv, tmp_path: Path) -> None:
    """Only spilled objects belong to retention: a dataset named by the user stays."""
    data = LocalStorage(tmp_path / "data")
    dataset = data.ref(data.write("datasets/train.bin", b"rows"), 4)
    inv = plane.queue("refs").submit(dataset)
    assert plane.dispatch.cancel(inv)

    result = retention.trim(plane.dispatch, invocations_older_than_s=0)

    assert result.invocations == 1 and result.refs_deleted == 0
    assert data.read("datasets/train.bin") == b"rows"


def test_ages_must_be_non_negative_numbers(plane: PlaneEnv) -> None:
    with pytest.raises(dls.DispatchError):
        plane.dispatch.trim_retention(frames_older_than_s=-1)  # type: ignore[attr-defined]
