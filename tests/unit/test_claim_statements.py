"""A claim on queues that hold nothing queued runs no claim statement: the queue row it reads
anyway carries the exact queued count (migration 18's counters), and an ack riding on a claim,
or an idle long-poll's safety poll, mostly finds its queues empty."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import msgpack
import pytest

from dreamlake.lakeshore.plane.sqlite import SqliteTransaction
from dreamlake.lakeshore.plane.store import SqlStore
from dreamlake.lakeshore.types import Ack, SubmitRequest
from tests.support import claiming
from tests.unit import test_handoff

store = test_handoff.store  # the fixture: a SQLite file plane with namespace `default`

CLAIMS = {"claim_fifo", "claim_fifo_batch", "claim_filo", "claim_level", "priority_levels"}


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The named statements run from here on, in order."""
    ran: list[str] = []
    for method in ("one", "all"):
        real = getattr(SqliteTransaction, method)

        def spy(
            self: SqliteTransaction,
            query: str,
            _real: Callable[..., object] = real,
            **params: object,
        ) -> object:
            ran.append(query)
            return _real(self, query, **params)

        monkeypatch.setattr(SqliteTransaction, method, spy)
    yield ran


def _submit(store: SqlStore, queue: str) -> str:
    (inv_id,) = store.submit("default", queue, [SubmitRequest(payload=msgpack.packb(1))])
    return inv_id


def _claim(store: SqlStore, queues: list[str]) -> list[str]:
    return [
        c.id
        for c in claiming.store_claim_many(
            store, "default", queues, worker="w1", limit=1, lease_s=60
        )
    ]


def test_a_claim_on_empty_queues_runs_no_claim_statement(
    store: SqlStore, statements: list[str]
) -> None:
    _submit(store, "a")
    assert _claim(store, ["a"])  # the only job: now running
    statements.clear()
    assert _claim(store, ["a"]) == []
    assert "queue_for_claim" in statements and not CLAIMS & set(statements)


def test_a_claim_still_takes_a_job_queued_on_any_of_its_queues(
    store: SqlStore, statements: list[str]
) -> None:
    _submit(store, "a")  # the first queue's row exists and holds nothing queued once claimed
    _claim(store, ["a"])
    wanted = _submit(store, "b")
    assert _claim(store, ["a", "b"]) == [wanted]


def test_an_ack_riding_on_a_claim_of_an_empty_queue_settles_and_claims_nothing(
    store: SqlStore, statements: list[str]
) -> None:
    inv_id = _submit(store, "a")
    (job,) = claiming.store_claim_many(store, "default", ["a"], worker="w1", limit=1, lease_s=60)
    statements.clear()
    errors, claims = claiming.store_ack_and_claim(
        store, "default", [Ack(inv_id, job.lease, b"ok")], ["a"], worker="w1", lease_s=60, limit=1
    )
    assert errors == [None] and claims == []
    assert not CLAIMS & set(statements)
    assert store.invocation("default", inv_id).state == "succeeded"


def test_a_job_the_claims_own_sweep_requeued_is_claimed(store: SqlStore) -> None:
    """The sweep runs first in the claim's transaction and its requeue is counted there."""
    inv_id = _submit(store, "a")
    (job,) = claiming.store_claim_many(store, "default", ["a"], worker="w1", limit=1, lease_s=0.001)
    deadline = time.monotonic() + 5
    while time.time() <= job.lease_expires_at:  # the lease runs out on the wall clock
        assert time.monotonic() < deadline
    store._swept_at = 0.0  # the next claim sweeps, whatever its period says
    assert store.count("default", "a", "queued") == 0  # still counted running
    assert _claim(store, ["a"]) == [inv_id]  # requeued by this claim's sweep, then taken
    assert store.invocation("default", inv_id).attempt == 2
