"""`run_worker`, `@udf` and thunks on `Dispatch(":memory:")`: the four body kinds and failures."""

from __future__ import annotations

import asyncio
import contextvars
import operator
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore import worker as worker_module
from dreamlake.lakeshore.errors import DispatchError


@pytest.fixture
def d() -> Iterator[dls.Dispatch]:
    with dls.Dispatch(":memory:") as plane:
        yield plane


@pytest.fixture(autouse=True)
def quick_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    """An idle run_worker looks at its stop event after each claim wait: keep those short."""
    monkeypatch.setattr(worker_module, "CLAIM_WAIT_S", 0.05)


@pytest.fixture
def q(d: dls.Dispatch) -> dls.SyncQueue:
    return dls.SyncQueue("tutorial", dispatch=d)


# -- the four body kinds, as module-level udfs (pickled by reference) -------------------------


def add(x: int, y: int = 1) -> int:
    return x + y


def count_up(n: int) -> Iterator[int]:
    yield from range(n)
    return n


async def add_later(x: int) -> int:
    await asyncio.sleep(0)
    return x + 100


async def count_up_async(n: int) -> AsyncIterator[str]:
    for i in range(n):
        await asyncio.sleep(0)
        yield f"tick {i}"


def explode(message: str) -> None:
    raise ValueError(message)


def test_a_sync_udf_runs_and_returns(q: dls.SyncQueue) -> None:
    f = dls.udf(add, queue=q)
    inv = f.submit(2, y=3)

    assert dls.run_worker(q, once=True) == 1

    assert q.result(inv, timeout=5) == 5
    assert list(q.stream(inv, timeout=1)) == []


def test_a_generator_udf_streams_its_yields_and_returns_its_value(q: dls.SyncQueue) -> None:
    f = dls.udf(count_up, queue=q)
    inv = f.submit(3)

    dls.run_worker(q, once=True)

    assert list(q.stream(inv, timeout=1)) == [0, 1, 2]
    assert q.result(inv, timeout=1) == 3


def test_an_async_udf_is_awaited(q: dls.SyncQueue) -> None:
    f = dls.udf(add_later, queue=q)
    inv = f.submit(1)

    dls.run_worker(q, once=True)

    assert q.result(inv, timeout=5) == 101


def test_an_async_generator_udf_streams_and_returns_none(q: dls.SyncQueue) -> None:
    f = dls.udf(count_up_async, queue=q)
    inv = f.submit(2)

    dls.run_worker(q, once=True)

    assert list(q.stream(inv, timeout=1)) == ["tick 0", "tick 1"]
    assert q.result(inv, timeout=1) is None


def test_a_udf_is_still_callable_locally(q: dls.SyncQueue) -> None:
    f = dls.udf(add, queue=q)

    assert f(2, y=5) == 7
    assert list(dls.udf(count_up, queue=q)(2)) == [0, 1]
    assert asyncio.run(dls.udf(add_later, queue=q)(1)) == 101
    assert f.__name__ == "add" and f.__doc__ == add.__doc__
    assert q.count() == 0, "calling locally submits nothing"


def test_udf_as_a_decorator_with_a_queue_name(d: dls.Dispatch) -> None:
    @dls.udf(queue="named")
    def mul(x: int, y: int) -> int:
        return x * y

    inv = mul.submit(6, 7, _dispatch=d)

    named = dls.SyncQueue("named", dispatch=d)
    assert named.count() == 1
    dls.run_worker(named, once=True)
    assert named.result(inv, timeout=5) == 42


def test_udf_submit_options_are_underscored(d: dls.Dispatch, q: dls.SyncQueue) -> None:
    f = dls.udf(add, queue=q)

    first = f.submit(1, _key="nightly", _priority=4.0)
    again = f.submit(2, _key="nightly")
    low = f.submit(10)

    assert first == again
    status = q.status(first)
    assert status.key == "nightly" and status.priority == 4.0
    job = q.claim()
    assert job is not None and job.id == first  # the higher priority goes first
    assert low != first


def test_udf_submit_to_another_plane_with_dispatch(q: dls.SyncQueue) -> None:
    f = dls.udf(add, queue=q)
    with dls.Dispatch(":memory:") as other:
        inv = f.submit(1, _dispatch=other)

        assert q.count() == 0
        there = dls.SyncQueue("tutorial", dispatch=other)
        assert there.count() == 1
        dls.run_worker(there, once=True)
        assert there.result(inv, timeout=5) == 2


def test_udf_keyword_arguments_named_like_options_still_reach_the_function(
    q: dls.SyncQueue,
) -> None:
    def takes_key(key: str, priority: int) -> str:
        return f"{key}:{priority}"

    f = dls.udf(takes_key, queue=q)
    inv = f.submit(key="k", priority=3)

    dls.run_worker(q, once=True)

    assert q.result(inv, timeout=5) == "k:3"
    assert q.status(inv).key is None


def test_udf_remote_submits_and_waits(q: dls.SyncQueue) -> None:
    f = dls.udf(add, queue=q)
    worker = threading.Thread(
        target=dls.run_worker,
        args=(q,),
        kwargs={"once": False, "stop": (stop := threading.Event())},
    )
    worker.start()
    try:
        assert f.remote(20, y=22, _timeout=10) == 42
    finally:
        stop.set()
        worker.join(timeout=10)
    assert not worker.is_alive()


class CountingPlane:
    """A plane that records which producer verbs a caller used."""

    def __init__(self, inner: dls.Dispatch) -> None:
        self.inner = inner
        self.namespace = inner.namespace
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.inner, name)
        if name in ("submit", "submit_and_wait", "invocation"):
            self.calls.append(name)
        return target


def test_udf_remote_is_one_submit_and_wait(d: dls.Dispatch) -> None:
    counting = CountingPlane(d)
    f = dls.udf(add, queue=dls.SyncQueue("rpc", dispatch=counting))  # type: ignore[arg-type]
    stop = threading.Event()
    worker = threading.Thread(target=dls.run_worker, args=(d, ["rpc"]), kwargs={"stop": stop})
    worker.start()
    try:
        assert f.remote(1, y=2, _timeout=10) == 3
    finally:
        stop.set()
        worker.join(timeout=10)
    assert counting.calls == ["submit_and_wait"]


def test_a_thunk_runs_by_value(q: dls.SyncQueue) -> None:
    base = 40
    inv = q.submit(dls.thunk(lambda: base + 2))

    dls.run_worker(q, once=True)

    assert q.result(inv, timeout=5) == 42


def test_a_thunk_with_arguments(q: dls.SyncQueue) -> None:
    inv = q.submit(dls.thunk(add, 1, y=2))

    dls.run_worker(q, once=True)

    assert q.result(inv, timeout=5) == 3


def test_an_exception_fails_the_job_with_its_traceback(q: dls.SyncQueue) -> None:
    inv = dls.udf(explode, queue=q).submit("the disk is full")

    dls.run_worker(q, once=True)

    assert q.status(inv).state == "failed"
    with pytest.raises(DispatchError) as err:
        q.result(inv, timeout=1)
    message = str(err.value)
    assert "Traceback (most recent call last)" in message
    assert "ValueError: the disk is full" in message
    assert "in explode" in message
    with pytest.raises(DispatchError, match="the disk is full"):
        list(q.stream(inv, timeout=1))


def test_a_failed_body_is_not_retried_by_run_worker(q: dls.SyncQueue) -> None:
    inv = q.submit(dls.thunk(explode, "once"))

    assert dls.run_worker(q, burst=True) == 1

    assert q.status(inv).attempt == 1 and q.count("queued") == 0


def test_a_plain_payload_without_a_handler_fails_clearly(q: dls.SyncQueue) -> None:
    inv = q.submit({"x": 1})

    dls.run_worker(q, once=True)

    with pytest.raises(DispatchError, match="no handler"):
        q.result(inv, timeout=1)


def test_a_handler_runs_plain_payloads_in_any_body_kind(q: dls.SyncQueue) -> None:
    def handler(payload: dict[str, int]) -> Iterator[int]:
        yield payload["x"]
        return payload["x"] * 2

    inv = q.submit({"x": 4})

    dls.run_worker(q, once=True, handler=handler)

    assert list(q.stream(inv, timeout=1)) == [4]
    assert q.result(inv, timeout=1) == 8


def test_once_runs_exactly_one_job(q: dls.SyncQueue) -> None:
    ids = [q.submit(dls.thunk(add, i)) for i in range(3)]

    assert dls.run_worker(q, once=True) == 1

    assert q.count("succeeded") == 1 and q.count("queued") == 2
    assert q.result(ids[0], timeout=1) == 1


def test_once_on_an_empty_queue_returns_at_once(q: dls.SyncQueue) -> None:
    assert dls.run_worker(q, once=True) == 0


def test_burst_runs_until_the_queue_is_empty(q: dls.SyncQueue) -> None:
    ids = [q.submit(dls.thunk(add, i)) for i in range(5)]

    assert dls.run_worker(q, burst=True) == 5

    assert [q.result(i, timeout=1) for i in ids] == [1, 2, 3, 4, 5]
    assert dls.run_worker(q, burst=True) == 0


def test_run_worker_on_a_plane_serves_every_queue(d: dls.Dispatch) -> None:
    a = dls.SyncQueue("alpha", dispatch=d).submit(dls.thunk(add, 1))
    b = dls.SyncQueue("beta", dispatch=d).submit(dls.thunk(add, 2))

    assert dls.run_worker(d, burst=True) == 2

    assert dls.SyncQueue("alpha", dispatch=d).result(a, timeout=1) == 2
    assert dls.SyncQueue("beta", dispatch=d).result(b, timeout=1) == 3


def test_run_worker_on_named_queues_leaves_the_others(d: dls.Dispatch) -> None:
    dls.SyncQueue("alpha", dispatch=d).submit(dls.thunk(add, 1))
    dls.SyncQueue("beta", dispatch=d).submit(dls.thunk(add, 2))

    assert dls.run_worker(d, ["alpha"], burst=True) == 1

    assert dls.SyncQueue("beta", dispatch=d).count() == 1


def test_run_worker_accepts_the_async_queue(d: dls.Dispatch) -> None:
    aq = dls.Queue("tutorial", dispatch=d)
    inv = aq.sync.submit(dls.thunk(add, 1))

    assert dls.run_worker(aq, once=True) == 1
    assert aq.sync.result(inv, timeout=1) == 2


def test_run_worker_uses_the_queue_kind(d: dls.Dispatch) -> None:
    q = dls.SyncQueue("stack", dispatch=d, kind="filo")
    q.submit(dls.thunk(add, 1))
    newest = q.submit(dls.thunk(add, 2))

    dls.run_worker(q, once=True)

    assert q.status(newest).state == "succeeded"


def test_a_stopped_worker_returns(q: dls.SyncQueue) -> None:
    stop = threading.Event()
    worker = threading.Thread(target=dls.run_worker, args=(q,), kwargs={"stop": stop})
    worker.start()
    inv = q.submit(dls.thunk(add, 9))
    assert q.result(inv, timeout=10) == 10

    stop.set()
    worker.join(timeout=10)

    assert not worker.is_alive()


def test_a_result_the_codec_cannot_carry_fails_the_job(q: dls.SyncQueue) -> None:
    inv = q.submit(dls.thunk(object))

    dls.run_worker(q, once=True)

    assert q.status(inv).state == "failed"


def test_a_udf_bound_to_an_async_queue_submits_through_its_sibling(d: dls.Dispatch) -> None:
    aq = dls.Queue("tutorial", dispatch=d)
    f = dls.udf(add, queue=aq)

    inv = f.submit(1)

    assert aq.sync.count() == 1
    assert "tutorial" in repr(f)
    dls.run_worker(aq, once=True)
    assert asyncio.run(aq.result(inv, timeout=5)) == 2


def test_a_job_repr_does_not_show_its_lease(q: dls.SyncQueue) -> None:
    q.submit(1)
    job = q.claim()

    assert job is not None and job.lease
    assert job.lease not in repr(job)


# -- the worker core under run_worker: what it shares with the daemon --------------------------


def test_a_job_longer_than_its_lease_succeeds_on_attempt_one(q: dls.SyncQueue) -> None:
    # Given a lease of 1 s and a body that runs 3 s: the core renews the lease while it runs.
    inv = q.submit(dls.thunk(time.sleep, 3.0))

    assert dls.run_worker(q, lease_s=1.0, burst=True) == 1

    row = q.status(inv)
    assert (row.state, row.attempt) == ("succeeded", 1)


def test_a_kill_request_ends_a_running_job_as_killed(q: dls.SyncQueue) -> None:
    inv = q.submit(dls.thunk(tick_forever))
    worker = threading.Thread(target=dls.run_worker, args=(q,), kwargs={"once": True})
    worker.start()
    wait_until(lambda: q.status(inv).state == "running")

    assert q.cancel(inv, kill=True)

    worker.join(20)
    assert not worker.is_alive()
    assert q.status(inv).state == "killed"


def test_a_timeout_ends_the_job_without_waiting_for_its_body(q: dls.SyncQueue) -> None:
    inv = q.submit(dls.thunk(tick_forever), timeout_s=0.3)

    assert dls.run_worker(q, once=True) == 1

    assert q.status(inv).state == "timeout"


def test_run_worker_refuses_a_payload_whose_signature_does_not_verify(q: dls.SyncQueue) -> None:
    # Given a worker holding a key the plane did not sign with (it signed with none).
    inv = q.submit(dls.thunk(operator.add, 1, 2))

    assert dls.run_worker(q, once=True, signing_key=b"k" * 32) == 0

    row = q.status(inv)
    assert row.state == "failed" and "signature" in (row.error or "")


def test_run_worker_registers_a_row_and_leaves_it_gone(d: dls.Dispatch, q: dls.SyncQueue) -> None:
    stop = threading.Event()
    worker = threading.Thread(target=dls.run_worker, args=(q,), kwargs={"stop": stop})
    worker.start()
    wait_until(lambda: [w.queues for w in d.workers()] == [["tutorial"]])

    stop.set()

    worker.join(20)
    assert not worker.is_alive()
    assert d.workers() == []  # marked gone on the way out


def tick_forever() -> Iterator[int]:
    n = 0
    while True:
        time.sleep(0.05)
        yield n
        n += 1


def wait_until(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def where_am_i() -> dict[str, object]:
    return {"id": dls.run.id, "attempt": dls.run.attempt, "queue": dls.run.queue}


def test_dls_run_names_the_job_its_attempt_and_its_queue(q: dls.SyncQueue) -> None:
    inv = q.submit(dls.thunk(where_am_i))

    dls.run_worker(q, once=True)

    assert q.result(inv, timeout=5) == {"id": inv, "attempt": 1, "queue": "tutorial"}


def test_a_udf_whose_body_submits_to_another_udf_can_be_submitted(d: dls.Dispatch) -> None:
    # Given a body that closes over another udf (pickled by value, so the udf and its queue
    # travel with it: by reference, not by their locks and connections)
    parent_q = dls.SyncQueue("parent", dispatch=d)
    child_q = dls.SyncQueue("child", dispatch=d)
    child = dls.udf(add, queue=child_q)

    def parent(x: int) -> str:
        return child.submit(x, y=1)

    inv = dls.udf(parent, queue=parent_q).submit(41)
    assert dls.run_worker(parent_q, once=True) == 1

    child_inv = parent_q.result(inv, timeout=5)
    assert dls.run_worker(child_q, once=True) == 1
    assert child_q.result(child_inv, timeout=5) == 42


def test_a_queue_handle_pickles_by_reference(tmp_path: Path) -> None:
    import cloudpickle

    with dls.Dispatch(tmp_path / "plane.db") as plane:
        q = dls.SyncPriorityQueue("urgent", dispatch=plane, priority_field="p")
        q.submit({"p": 3})

        back = cloudpickle.loads(cloudpickle.dumps(q))

        assert (type(back), back.name, back.priority_field) == (type(q), "urgent", "p")
        assert back.dispatch is not plane and back.count() == 1  # its own plane, same file
        on_default = cloudpickle.loads(cloudpickle.dumps(dls.SyncQueue("x")))
        assert on_default._dispatch is None  # whoever unpickles uses their own default plane


def test_a_queue_on_an_in_memory_plane_cannot_leave_its_process(d: dls.Dispatch) -> None:
    from dreamlake.lakeshore.plane import reference

    ref = reference.reference(d)
    assert ref is not None and ref[0] == "local"

    with pytest.raises(DispatchError, match="in-memory plane cannot leave its process"):
        reference.resolve(("local", -1, ref[2]))


# -- the runner thread ---------------------------------------------------------------------------

_SEEN: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="nothing")
_RELEASE = threading.Event()
_HELD_ON: list[int] = []  # the thread the held body ran on


def thread_and_context() -> tuple[int, str]:
    seen = _SEEN.get()
    _SEEN.set("set by an earlier body")
    return threading.get_ident(), seen


def hold_until_released() -> int:
    _HELD_ON.append(threading.get_ident())
    _RELEASE.wait(30)
    return threading.get_ident()


def test_bodies_run_on_one_runner_thread_each_in_a_fresh_context(q: dls.SyncQueue) -> None:
    first, second = q.submit(dls.thunk(thread_and_context)), q.submit(dls.thunk(thread_and_context))

    assert dls.run_worker(q, burst=True) == 2

    (thread_1, seen_1), (thread_2, seen_2) = q.result(first, timeout=5), q.result(second, timeout=5)
    assert thread_1 == thread_2  # no thread started per job
    assert seen_1 == seen_2 == "nothing"  # what the first body set stayed in its context


def test_a_body_abandoned_at_its_timeout_keeps_its_thread_and_the_next_job_runs(
    q: dls.SyncQueue,
) -> None:
    _RELEASE.clear()
    _HELD_ON.clear()
    held = q.submit(dls.thunk(hold_until_released), timeout_s=0.3)
    after = q.submit(dls.thunk(thread_and_context))
    try:
        assert dls.run_worker(q, burst=True) == 2

        assert q.status(held).state == "timeout"
        thread_after, _ = q.result(after, timeout=5)
        # The abandoned body still holds its runner (alive, so its ident is not reused).
        (held_on,) = _HELD_ON
        assert any(t.ident == held_on and t.is_alive() for t in threading.enumerate())
        assert thread_after != held_on
    finally:
        _RELEASE.set()
