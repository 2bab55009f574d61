"""A submit-and-wait owes its fsync and the ack that ends its job pays it: one fsync on a
`q.call`'s path, and no id handed out before the log that holds it is on disk.

SQLite's own fsyncs happen inside the library; the connector's flush of an owed commit goes
through `os.fdatasync`, which these tests watch (`flushes`) to tell the two apart.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from pathlib import Path

import msgpack
import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane.dispatch import open_store
from dreamlake.lakeshore.plane.sqlite import SqliteConnector
from dreamlake.lakeshore.plane.store import SqlStore
from dreamlake.lakeshore.plane.store.base import new_id
from dreamlake.lakeshore.types import SubmitRequest
from tests.support import claiming
from tests.unit import test_handoff
from tests.unit.test_handoff import NS, Client, serve, until


@pytest.fixture
def flushes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files `os.fdatasync` flushed from here on, by their paths."""
    return _flushes(monkeypatch)


def _flushes(monkeypatch: pytest.MonkeyPatch, *, by: str | None = None) -> list[str]:
    """As `flushes`; `by`: only the flushes that connector method asked for."""
    seen: list[str] = []
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        # fdatasync <- SqliteConnector._sync_log <- the method that owed it.
        if by is None or sys._getframe(2).f_code.co_name == by:
            seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    return seen


store = test_handoff.store  # the fixture: a SQLite file plane with namespace `default`


def _connector(store: SqlStore) -> SqliteConnector:
    assert isinstance(store.connector, SqliteConnector)
    return store.connector


def _request(**kw: object) -> SubmitRequest:
    return SubmitRequest(payload=msgpack.packb(1), **kw)  # type: ignore[arg-type]


# -- the connector --------------------------------------------------------------------------


def test_an_owed_commit_is_on_disk_once_sync_returns(store: SqlStore, flushes: list[str]) -> None:
    connector = _connector(store)
    store.submit("default", "q", [_request()], sync_later=True)
    mark = connector.mark()
    assert not connector.synced(mark) and flushes == []  # committed, not flushed

    connector.sync(mark)
    assert flushes == [connector.path + "-wal"] and connector.synced(mark)
    connector.sync(mark)
    assert len(flushes) == 1  # paid once


def test_a_durable_commit_that_writes_pays_what_is_owed(
    store: SqlStore, flushes: list[str]
) -> None:
    """SQLite fsyncs the log at a durable commit, every earlier frame with it."""
    connector = _connector(store)
    store.submit("default", "q", [_request()], sync_later=True)
    mark = connector.mark()
    store.submit("default", "q", [_request()])
    assert connector.synced(mark)
    connector.sync(mark)
    assert flushes == []


def test_a_durable_commit_that_writes_nothing_pays_what_is_owed_first(
    store: SqlStore, flushes: list[str]
) -> None:
    """A submit sent again (its answer lost) writes nothing and answers the id that the first
    one made: that first commit must be on disk before the id goes out a second time."""
    connector = _connector(store)
    (first,) = store.submit("default", "q", [_request(id=new_id())], sync_later=True)
    mark = connector.mark()
    assert not connector.synced(mark)

    (again,) = store.submit("default", "q", [_request(id=first)])
    assert again == first and store.count("default", "q", "queued") == 1
    assert flushes == [connector.path + "-wal"] and connector.synced(mark)


def test_a_claim_owes_nothing(store: SqlStore, flushes: list[str]) -> None:
    """A claim commits without an fsync too, but promised none: a durable transaction that
    writes nothing after it flushes nothing."""
    connector = _connector(store)
    store.submit("default", "q", [_request()])
    assert claiming.store_claim_many(store, "default", ["q"], worker="w1", limit=1, lease_s=60)
    with connector.transaction() as tx:
        tx.one("get_queue", ns="default", name="q")
    assert flushes == []


@pytest.mark.parametrize("where", [":memory:", "normal"])
def test_nothing_is_owed_on_a_plane_that_does_not_flush(
    where: str, tmp_path: Path, flushes: list[str]
) -> None:
    store = open_store(":memory:" if where == ":memory:" else tmp_path / "n.db", durable=False)
    try:
        store.ensure_namespace("default")
        store.submit("default", "q", [_request()], sync_later=True)
        mark = store.connector.mark()
        assert store.connector.synced(mark)
        store.connector.sync(mark)
        assert flushes == []
    finally:
        store.close()


# -- the server's submit-and-wait -------------------------------------------------------------


def test_a_submit_and_wait_answered_by_an_ack_needs_no_fsync_of_its_own(
    store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    connector = _connector(store)
    flushes = _flushes(monkeypatch, by="sync")

    async def scenario(c: Client) -> None:
        call, job = await c.call(b"\x01")
        # The job runs while the disk has yet to hear of it; nothing has named its id yet.
        assert not connector.synced(connector.mark()) and not call.done()
        ack = {"id": job["id"], "lease": job["lease"], "result": b"done"}
        await c.post("/claims", {"queues": ["q"], "worker": "w1", "acks": [ack]})
        answer = await call
        assert answer["ids"] == [job["id"]] and answer["invocation"]["state"] == "succeeded"

    serve(store, scenario)
    assert flushes == []  # the ack's own durable commit carried the submit to disk
    assert connector.synced(connector.mark())


def test_a_submit_and_wait_whose_wait_runs_out_flushes_before_it_answers(
    store: SqlStore, flushes: list[str]
) -> None:
    connector = _connector(store)
    answered: list[bool] = []

    async def scenario(c: Client) -> None:
        answer = await c.post("/queues/q/invocations", {"payload": b"\x01"}, result_wait=0.05)
        answered.append(connector.synced(connector.mark()))
        assert answer["invocation"]["state"] == "queued" and len(answer["ids"]) == 1

    serve(store, scenario)
    assert answered == [True] and flushes == [connector.path + "-wal"]


@pytest.mark.parametrize("fields", [{"key": "k1"}, {}], ids=["keyed", "no wait"])
def test_a_keyed_submit_and_wait_and_a_plain_submit_commit_durably(
    store: SqlStore, fields: dict[str, str]
) -> None:
    """A key's id may be answered to another producer, which cannot know what this one
    owes; a submit that does not wait answers its id at once."""
    connector = _connector(store)
    owed: list[bool] = []

    async def scenario(c: Client) -> None:
        claim = c.claim()
        await c.held()
        params = {"result_wait": 20} if fields else {}
        call = asyncio.ensure_future(
            c.post("/queues/q/invocations", {"payload": b"\x01", **fields}, **params)
        )
        job = (await claim)["claim"]
        owed.append(not connector.synced(connector.mark()))
        await c.post(f"/invocations/{job['id']}/ack", {"lease": job["lease"], "result": b"ok"})
        await call

    serve(store, scenario)
    assert owed == [False]


# -- the embedded plane -----------------------------------------------------------------------


def test_embedded_submit_and_wait_returns_nothing_before_the_log_is_on_disk(
    tmp_path: Path, flushes: list[str]
) -> None:
    """No worker ran it: the producer flushes the log itself before the id comes back."""
    with dls.Dispatch(tmp_path / "db.sqlite") as plane:
        inv = plane.submit_and_wait("q", _request(), wait_s=0.01)
        assert inv.state == "queued"
        assert flushes == [str(tmp_path / "db.sqlite") + "-wal"]
        assert plane.store.connector.synced(plane.store.connector.mark())


def test_embedded_call_runs_its_job_while_the_producer_waits_for_the_disk(
    tmp_path: Path,
) -> None:
    """The wake-up goes out with the submit's commit and the flush comes after it, not after
    the job: a worker that runs each job only once the submit is on disk still answers every
    call (a producer that flushed after its wait would leave that worker waiting)."""
    with dls.Dispatch(tmp_path / "db.sqlite") as plane:
        connector = plane.store.connector

        def handler(x: int) -> int:
            deadline = time.monotonic() + 0.5  # under the read sweep's period, which pays too
            while not connector.synced(connector.mark()):
                assert time.monotonic() < deadline, "the producer waited for the job first"
                time.sleep(0.001)
            return x + 1

        stop = threading.Event()
        worker = threading.Thread(
            target=dls.run_worker,
            args=(plane, ["q"]),
            kwargs={"stop": stop, "handler": handler},
            daemon=True,
        )
        worker.start()
        try:
            q = dls.SyncQueue("q", dispatch=plane)
            assert [q.call(i, timeout=20) for i in range(3)] == [1, 2, 3]
        finally:
            stop.set()
            worker.join(timeout=10)


def test_the_waiting_route_still_answers_a_reader_of_the_job(store: SqlStore) -> None:
    """A reader sees the job while its submit owes its fsync (a power cut could take it back,
    as it could take back any claim): reads are not held for the flush, answers of ids are."""

    async def scenario(c: Client) -> None:
        call, job = await c.call(b"\x01")
        read = await c.http.get(f"{NS}/invocations/{job['id']}")
        assert read.status_code == 200 and msgpack.unpackb(read.content)["state"] == "running"
        await c.post(f"/invocations/{job['id']}/ack", {"lease": job["lease"], "result": b"ok"})
        await until(call.done, "the submit-and-wait to answer")

    serve(store, scenario)
