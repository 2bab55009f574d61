"""`Dispatch`: targets, namespaces, and waits that wake on another process's commit."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.codec import encode
from dreamlake.lakeshore.errors import InvalidArgument, NotFound
from dreamlake.lakeshore.plane import sqlite as sqlite_module
from dreamlake.lakeshore.plane import waiting as waiting_module
from dreamlake.lakeshore.plane.wakeup import SAFETY_POLL_S
from dreamlake.lakeshore.types import Ack, Invocation
from tests.support import claiming
from tests.support.daemons import wait_until
from tests.support.spies import counted, finished


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[dls.Dispatch, dls.Dispatch]]:
    """Two planes on one file: each has its own wake-up socket, as two processes would."""
    path = tmp_path / "db.sqlite"
    with dls.Dispatch(path) as a, dls.Dispatch(path) as b:
        yield a, b


def test_a_commit_between_a_waiters_read_and_its_wait_still_wakes_it(
    pair: tuple[dls.Dispatch, dls.Dispatch],
) -> None:
    waiter, worker = pair
    inv = dls.SyncQueue("gpu", dispatch=worker).submit(1)
    job = dls.SyncQueue("gpu", dispatch=worker).claim()
    assert job is not None
    read = waiter.store.invocation
    acked: list[bool] = []

    def read_then_ack(ns: str, inv_id: str) -> Invocation:
        row = read(ns, inv_id)
        if not acked:  # the worker commits right after the waiter's first read
            dls.SyncQueue("gpu", dispatch=worker).ack(job, "done")
            acked.append(True)
        return row

    waiter.store.invocation = read_then_ack  # type: ignore[method-assign]
    started = time.monotonic()

    assert dls.SyncQueue("gpu", dispatch=waiter).result(inv, timeout=10) == "done"

    assert time.monotonic() - started < SAFETY_POLL_S * 0.8, "woken by the safety poll"


def test_a_call_reads_its_job_only_once_a_wake_up_says_it_may_have_ended(
    pair: tuple[dls.Dispatch, dls.Dispatch], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a producer whose reads of a job's row are recorded, and a worker on the same file
    producer, worker = pair
    read = producer.store.invocation
    states: list[str] = []

    def recorded(ns: str, inv_id: str) -> Invocation:
        row = read(ns, inv_id)
        states.append(row.state)
        return row

    monkeypatch.setattr(producer.store, "invocation", recorded)
    answer: dict[str, Any] = {}

    def call() -> None:
        answer["value"] = dls.SyncQueue("gpu", dispatch=producer).call(7, timeout=30)

    caller = threading.Thread(target=call)
    caller.start()

    # When the worker claims the job and settles it
    queue = dls.SyncQueue("gpu", dispatch=worker)
    job = wait_until(queue.claim, what="the call's job")
    queue.ack(job, 14)
    caller.join(timeout=30)

    # Then the call read the row once, after the ack: not straight after its submit, when the
    # job could not have ended (the plane minted its id, so it was new)
    assert answer == {"value": 14}
    assert states == ["succeeded"]


def test_a_waiting_claim_wakes_on_a_submit_through_another_plane(
    pair: tuple[dls.Dispatch, dls.Dispatch],
) -> None:
    worker, producer = pair
    box: dict[str, object] = {}

    def claim() -> None:
        box["job"] = dls.SyncQueue("gpu", dispatch=worker).claim(wait=10.0)
        box["at"] = time.monotonic()

    t = threading.Thread(target=claim)
    t.start()
    eventually_listening(worker)
    sent = time.monotonic()
    inv = dls.SyncQueue("gpu", dispatch=producer).submit(1)
    t.join(timeout=20)

    assert box["job"].id == inv  # type: ignore[attr-defined]
    assert box["at"] - sent < SAFETY_POLL_S * 0.8  # type: ignore[operator]


def test_a_waiting_stream_wakes_on_a_post_through_another_plane(
    pair: tuple[dls.Dispatch, dls.Dispatch],
) -> None:
    reader, worker = pair
    wq = dls.SyncQueue("gpu", dispatch=worker)
    inv = wq.submit(1)
    job = wq.claim()
    assert job is not None
    frames = dls.SyncQueue("gpu", dispatch=reader).stream(inv, timeout=10)
    box: dict[str, object] = {}

    def read() -> None:
        box["value"] = next(frames)
        box["at"] = time.monotonic()

    t = threading.Thread(target=read)
    t.start()
    eventually_listening(reader)
    sent = time.monotonic()
    wq.post(inv, "hello")
    t.join(timeout=20)
    frames.close()

    assert box["value"] == "hello"
    assert box["at"] - sent < SAFETY_POLL_S * 0.8  # type: ignore[operator]


def test_a_worker_reads_the_store_again_only_when_work_comes_to_its_queues(
    pair: tuple[dls.Dispatch, dls.Dispatch], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After its ack rode on a claim that found nothing, the worker's claim sleeps through its
    own ack and through commits elsewhere; the producer's result wait sleeps through the
    claim of its job. Each of those wake-ups was a store transaction for nothing."""
    monkeypatch.setattr(waiting_module, "SAFETY_POLL_S", 60.0)  # only a wake-up ends a wait
    worker, producer = pair
    q = dls.SyncQueue("gpu", dispatch=producer)
    first = q.submit(1)
    job = claiming.claim(worker, ["gpu"], worker="w")
    assert job is not None
    claims = counted(worker.store, "claim_many")
    box: dict[str, Any] = {}

    def ack_and_claim() -> None:
        acks = [Ack(job.id, job.lease, encode("one"))]
        box["got"] = claiming.ack_and_claim(worker, acks, ["gpu"], worker="w", limit=1, wait_s=30.0)

    claimer = threading.Thread(target=ack_and_claim)
    claimer.start()
    assert q.result(first, timeout=10) == "one"  # the ack committed
    dls.SyncQueue("cpu", dispatch=producer).submit(0)  # work, but on a queue it does not serve
    # counted as they return: a read still on its way when the ack commits sees the job ended
    # and needs no second read, which this test counts on (fresh-clone CI failed once so)
    reads = finished(producer.store, "invocation")
    second = q.submit(2)
    reader = threading.Thread(target=lambda: box.update(result=q.result(second, timeout=30)))
    reader.start()
    claimer.join(timeout=30)
    errors, got = box["got"]
    assert errors == [None] and [c.id for c in got] == [second]
    wait_until(lambda: reads() == 1, what="the first read")  # then it sleeps, claimed or not
    worker.ack(second, got[0].lease, encode("two"))
    reader.join(timeout=30)

    assert box["result"] == "two"
    assert claims() == 1  # woken once: by the submit to its queue
    assert reads() == 2  # once more, after the ack


def test_a_claim_on_the_default_queue_wakes_on_a_submit_there(
    pair: tuple[dls.Dispatch, dls.Dispatch], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No queues named is the default queue, for the wake-ups it waits for too."""
    monkeypatch.setattr(waiting_module, "SAFETY_POLL_S", 60.0)  # only a wake-up ends a wait
    worker, producer = pair
    box: dict[str, Any] = {}
    claimer = threading.Thread(
        target=lambda: box.update(got=claiming.claim(worker, [], worker="w", wait_s=60.0))
    )
    claimer.start()
    eventually_listening(worker)
    inv = dls.SyncQueue("default", dispatch=producer).submit(1)
    claimer.join(timeout=20)

    assert not claimer.is_alive(), "the submit did not wake the claim"
    assert box["got"] is not None and box["got"].id == inv


def test_a_claim_wakes_nobody_but_a_submit_blocked_for_room(
    pair: tuple[dls.Dispatch, dls.Dispatch], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim brings no work and ends nothing. On a queue whose submits never wait for room
    it sends no wake-up at all; on one that blocks when full, the blocked submit wakes for it
    (its wait ends woken, not at the 1 s retry a full queue's refusal names)."""
    monkeypatch.setattr(waiting_module, "SAFETY_POLL_S", 60.0)  # only a wake-up ends a wait
    worker, producer = pair
    notifies = counted(worker.store.waker, "notify")
    dls.SyncQueue("open", dispatch=producer).submit(1)
    assert claiming.claim(worker, ["open"], worker="w") is not None
    assert notifies() == 0

    producer.create_queue("narrow", admission={"max_depth": 1, "on_full": "block"})
    q = dls.SyncQueue("narrow", dispatch=producer)
    q.submit("first")
    waits: list[bool] = []
    waiting = threading.Event()
    wait = producer.store.waker.wait

    def spied_wait(*args: Any, **kwargs: Any) -> bool:
        waiting.set()
        waits.append(wait(*args, **kwargs))
        return waits[-1]

    producer.store.waker.wait = spied_wait  # type: ignore[method-assign]
    blocked = threading.Thread(target=lambda: q.submit("second", block_s=30.0))
    blocked.start()
    assert waiting.wait(10), "the submit never waited for room"
    assert claiming.claim(worker, ["narrow"], worker="w") is not None
    blocked.join(timeout=30)

    assert not blocked.is_alive()
    # The wait after which the submit fitted ended woken; without the claim's wake-up it
    # would have ended at its 1 s retry (a wait may also time out first on a loaded box).
    assert waits and waits[-1] is True, f"the blocked submit was not woken by the claim: {waits}"
    assert notifies() == 1


def eventually_listening(plane: dls.Dispatch) -> None:
    deadline = time.monotonic() + 10
    directory = Path(plane.target + ".wake")
    while len(list(directory.glob("*.peer"))) < 1:
        assert time.monotonic() < deadline, "the waiter never started listening"
        time.sleep(0.005)


def test_sqlite_urls_name_a_file(tmp_path: Path) -> None:
    path = tmp_path / "url.sqlite"

    with dls.Dispatch(f"sqlite:///{path}") as d:
        dls.SyncQueue("gpu", dispatch=d).submit(1)

    assert path.exists()
    with dls.Dispatch(path) as again:
        assert dls.SyncQueue("gpu", dispatch=again).count() == 1


def test_a_file_plane_keeps_its_rows_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    with dls.Dispatch(path, durable=False) as d:
        inv = dls.SyncQueue("gpu", dispatch=d).submit({"x": 1}, key="k")

    with dls.Dispatch(path) as d:
        q = dls.SyncQueue("gpu", dispatch=d)
        assert q.submit({"x": 2}, key="k") == inv
        job = q.claim()
        assert job is not None and job.payload == {"x": 1}


def test_memory_planes_are_separate() -> None:
    with dls.Dispatch(":memory:") as a, dls.Dispatch(":memory:") as b:
        dls.SyncQueue("gpu", dispatch=a).submit(1)

        assert dls.SyncQueue("gpu", dispatch=b).count() == 0


def test_namespaces_do_not_see_each_other(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    with dls.Dispatch(path, namespace="team-a") as a, dls.Dispatch(path, namespace="team-b") as b:
        qa, qb = dls.SyncQueue("gpu", dispatch=a), dls.SyncQueue("gpu", dispatch=b)
        inv = qa.submit(1, key="shared-key")

        assert qb.submit(2, key="shared-key") != inv
        assert qb.count() == 1
        with pytest.raises(NotFound):
            qb.status(inv)
        with pytest.raises(NotFound):
            qb.cancel(inv)
        with pytest.raises(NotFound):
            list(qb.stream(inv, timeout=0.1))
        job = qb.claim()
        assert job is not None and job.payload == 2
        assert qb.claim() is None
        assert qa.status(inv).state == "queued"


def test_a_bad_namespace_name_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="namespace"):
        dls.Dispatch(":memory:", namespace="Team A")


def test_repr_and_context_manager(tmp_path: Path) -> None:
    with dls.Dispatch(":memory:", namespace="lab") as d:
        assert repr(d) == "Dispatch(':memory:', namespace='lab')"
        assert isinstance(d, dls.Plane)


def _synchronous(plane: dls.Dispatch) -> int:
    with plane.store.connector.transaction(write=False) as tx:
        conn = tx._conn  # type: ignore[attr-defined]
        return int(conn.execute("PRAGMA synchronous").fetchone()[0])


def test_a_claim_commits_without_fsync_and_restores_full_after(tmp_path: Path) -> None:
    """Claims skip the disk flush (a power cut only re-runs a job); every other write keeps
    synchronous=FULL, including after a claim that raised."""
    full, normal = 2, 1
    with dls.Dispatch(tmp_path / "db.sqlite") as plane:
        connector = plane.store.connector
        seen = []
        with connector.transaction(durable=False) as tx:
            seen.append(int(tx._conn.execute("PRAGMA synchronous").fetchone()[0]))  # type: ignore[attr-defined]
        assert seen == [normal] and _synchronous(plane) == full
        with pytest.raises(RuntimeError), connector.transaction(durable=False):
            raise RuntimeError("a claim that failed half-way")
        assert _synchronous(plane) == full
        q = dls.SyncQueue("gpu", dispatch=plane)
        q.submit(1)
        assert q.claim() is not None
        assert _synchronous(plane) == full


def test_a_durable_write_runs_inline_only_while_the_disk_is_quick(tmp_path: Path) -> None:
    """`run_if_free(durable=True)`: the server's event loop runs a submit or an ack itself
    only while this file's commits are quick; after slow fsyncs they go to a thread again."""
    with dls.Dispatch(tmp_path / "db.sqlite") as plane:
        connector = plane.store.connector
        q = dls.SyncQueue("gpu", dispatch=plane)
        q.submit(1)
        assert connector.commit_s > 0  # the submit's COMMIT was timed
        # As after quick fsyncs, whatever this disk did just now: on a loaded box one fsync of
        # tens of milliseconds lifts the average past the limit, and that is the other case.
        connector.commit_s = sqlite_module.INLINE_COMMIT_MAX_S / 2

        ran, ids = connector.run_if_free(lambda: q.submit_many([2]), durable=True)
        assert ran and ids is not None and len(ids) == 1

        connector.commit_s = 10 * sqlite_module.INLINE_COMMIT_MAX_S  # as after slow fsyncs
        calls: list[int] = []
        assert connector.run_if_free(lambda: calls.append(1), durable=True) == (False, None)
        assert calls == []  # not run here: the caller hands it to a thread
        assert connector.run_if_free(lambda: calls.append(1)) == (True, None)  # a quick write
        assert q.count() == 2


def test_run_if_free_answers_at_once_when_another_thread_holds_the_writer(
    tmp_path: Path,
) -> None:
    """Only the lock decides here: the disk's measured speed (`commit_s`, which a slow fsync
    under load raises past INLINE_COMMIT_MAX_S) is the test above's subject, so it is set to
    a quick disk's before each look, after the commits that would have measured it."""
    quick = sqlite_module.INLINE_COMMIT_MAX_S / 2
    with dls.Dispatch(tmp_path / "db.sqlite") as plane:
        connector = plane.store.connector
        holding, release = threading.Event(), threading.Event()

        def hold() -> None:
            with connector.transaction():
                holding.set()
                release.wait(10)

        holder = threading.Thread(target=hold)
        holder.start()
        try:
            assert holding.wait(10)
            connector.commit_s = quick
            assert connector.run_if_free(lambda: 1, durable=True) == (False, None)
        finally:
            release.set()
            holder.join(10)
        connector.commit_s = quick  # the holder's own commit was timed too
        assert connector.run_if_free(lambda: 1, durable=True) == (True, 1)


def test_a_writer_waits_for_another_processs_write_lock_only_as_long_as_it_may(
    tmp_path: Path,
) -> None:
    """BEGIN IMMEDIATE polls while another connection (another process) holds the write lock:
    it gets in once the lock is free, and gives up as busy past its wait."""
    path = tmp_path / "db.sqlite"
    with dls.Dispatch(path) as plane:
        connector = plane.store.connector
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")
        try:
            connector._wait_s = 0.05  # type: ignore[attr-defined]
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                dls.SyncQueue("gpu", dispatch=plane).submit(1)
            connector._wait_s = 30.0  # type: ignore[attr-defined]
            threading.Timer(0.05, other.execute, args=("COMMIT",)).start()
            inv = dls.SyncQueue("gpu", dispatch=plane).submit(2)  # waits, then gets in
        finally:
            with contextlib.suppress(sqlite3.OperationalError):
                other.execute("COMMIT")
            other.close()
        assert plane.invocation(inv).state == "queued"
        assert dls.SyncQueue("gpu", dispatch=plane).count() == 1  # the refused one wrote nothing
