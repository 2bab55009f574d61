"""Checkpoints and preemption notices in the in-process worker (issue 35): `run_worker`'s inline
slots through the shared worker core, on the in-memory plane."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.plane.dispatch import Dispatch
from dreamlake.lakeshore.run import NotInJob
from dreamlake.lakeshore.work.core import WorkerConfig, WorkerCore
from dreamlake.lakeshore.work.inline import InlineSlot
from tests.support.daemons import wait_until


@pytest.fixture
def plane(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Dispatch]:
    monkeypatch.setenv("LAKESHORE_HOME", str(tmp_path))
    monkeypatch.setenv("LAKESHORE_STORAGE", (tmp_path / "storage").as_uri())
    with Dispatch(":memory:") as d:
        yield d


def _resume_once(first: Any) -> Any:
    """Checkpoint `first` on attempt 1 and stop as preempted; return the checkpoint after."""
    if dls.run.attempt == 1:
        assert dls.run.last_checkpoint() is None
        dls.run.checkpoint(first)
        raise dls.Preempted()
    return dls.run.last_checkpoint()


def sync_body(first: Any) -> Any:
    return _resume_once(first)


def generator_body(first: Any) -> Iterator[int]:
    yield dls.run.attempt
    return _resume_once(first)  # type: ignore[no-any-return]


async def async_body(first: Any) -> Any:
    await asyncio.sleep(0)
    return _resume_once(first)


async def async_generator_body(first: Any) -> AsyncIterator[Any]:
    await asyncio.sleep(0)
    yield _resume_once(first)


@pytest.mark.parametrize("body", [sync_body, generator_body, async_body])
def test_every_body_kind_resumes_from_its_checkpoint(plane: Dispatch, body: Any) -> None:
    q = dls.SyncQueue("ck", dispatch=plane)
    state = {"step": 7, "w": [0.5, 0.25]}
    inv = q.submit(dls.thunk(body, state), max_attempts=1)

    assert dls.run_worker(q, burst=True) == 2

    assert q.result(inv, timeout=5) == state
    row = q.status(inv)
    assert (row.attempt, row.preemptions, row.ended_by) == (2, 1, "notice")


def test_an_async_generator_body_resumes_from_its_checkpoint(plane: Dispatch) -> None:
    q = dls.SyncQueue("ck", dispatch=plane)
    inv = q.submit(dls.thunk(async_generator_body, (1, 2)), max_attempts=1)

    assert dls.run_worker(q, burst=True) == 2

    assert list(q.stream(inv, timeout=5)) == [(1, 2)]
    assert [f.kind for f in plane.frames(inv)] == ["RESUME", "VALUE"]


def test_checkpoint_outside_a_job_is_refused() -> None:
    with pytest.raises(NotInJob, match=r"dls\.run\.checkpoint works only inside a running job"):
        dls.run.checkpoint({"step": 1})
    with pytest.raises(NotInJob, match="last_checkpoint works only inside a running job"):
        dls.run.last_checkpoint()
    assert not dls.run.preempting.is_set() and dls.run.preempt_deadline is None


def keeps_the_previous_checkpoint() -> str:
    dls.run.checkpoint({"step": 1})
    try:
        dls.run.checkpoint({"step": 2, "lock": threading.Lock()})
    except InvalidArgument as exc:
        return f"{dls.run.last_checkpoint()} / {exc}"
    return "stored a lock"


def test_a_value_the_codec_cannot_carry_is_refused_and_the_last_checkpoint_stays(
    plane: Dispatch,
) -> None:
    q = dls.SyncQueue("ck", dispatch=plane)
    inv = q.submit(dls.thunk(keeps_the_previous_checkpoint))

    assert dls.run_worker(q, once=True) == 1

    answer = q.result(inv, timeout=5)
    assert answer.startswith("{'step': 1} / dls.run.checkpoint cannot store this value")
    assert "cannot encode a _thread.lock" in answer
    stored = dls.decode(q.status(inv).checkpoint or b"")
    assert isinstance(stored, dls.Ref) and stored.spilled and stored.storage


#: What the notice test's body saw, in this process (a thunk's arguments travel as copies).
SEEN: list[Any] = []


def waits_for_the_notice() -> None:
    seen = SEEN
    dls.run.on_preempt(lambda: seen.append("callback"))
    seen.append("running")
    assert dls.run.preempting.wait(30)
    seen.append(dls.run.preempt_deadline)
    dls.run.checkpoint({"stopped_at": "notice"})
    raise dls.Preempted()


def test_a_notice_reaches_the_running_body_and_it_goes_back_as_a_preemption(
    plane: Dispatch,
) -> None:
    q = dls.SyncQueue("ck", dispatch=plane)
    seen = SEEN
    seen.clear()
    inv = q.submit(dls.thunk(waits_for_the_notice), max_attempts=1)
    config = WorkerConfig(name="notice", queues=("ck",), preempt_grace_s=20.0)
    core = WorkerCore(plane, config, lambda i, sink: InlineSlot(i, sink, plane=plane))
    done: list[int] = []
    runner = threading.Thread(target=lambda: done.append(core.run()))
    runner.start()
    wait_until(lambda: "running" in seen, what="the body to start")

    before = time.time()
    core.preempt("test notice")
    runner.join(30)

    assert done == [0]
    assert seen[1] == "callback" and before + 19 < seen[2] <= time.time() + 20
    row = q.status(inv)
    assert (row.state, row.preemptions, row.ended_by) == ("queued", 1, "notice")
    assert row.checkpoint is not None


def test_a_rebalance_only_stops_claiming(plane: Dispatch) -> None:
    q = dls.SyncQueue("ck", dispatch=plane)
    config = WorkerConfig(name="rebalance", queues=("ck",), claim_wait_s=0.05)
    core = WorkerCore(plane, config, lambda i, sink: InlineSlot(i, sink, plane=plane))
    runner = threading.Thread(target=core.run)
    runner.start()
    try:
        wait_until(lambda: core.worker_id is not None, what="the worker to register")
        core.pause_claiming("test rebalance")
        inv = q.submit(dls.thunk(int, "5"))
        wait_until(lambda: q.status(inv).state == "queued", what="the submit")
        time.sleep(0.3)  # give a claim loop that ignored the pause the chance to take it
        assert q.status(inv).state == "queued" and not core.draining
    finally:
        core.drain("test over")
        runner.join(30)


def out_of_memory() -> None:
    raise MemoryError()


def test_a_memory_error_ends_the_job_as_out_of_host_memory_in_run_worker(
    plane: Dispatch,
) -> None:
    q = dls.SyncQueue("ck", dispatch=plane)
    inv = q.submit(dls.thunk(out_of_memory), max_attempts=3)

    assert dls.run_worker(q, burst=True) == 1

    row = q.status(inv)
    assert (row.state, row.ended_by, row.attempt) == ("failed", "oom", 1)
    assert row.error is not None and row.error.startswith("ran out of host memory (MemoryError)")
