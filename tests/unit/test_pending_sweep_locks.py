"""The pending-reason sweep (store/schedulable.py) takes no lock a claim would skip.

Claims pick with `FOR UPDATE SKIP LOCKED` on PostgreSQL: a row another transaction holds is
passed over as if another claimer had it. The sweep used to write each queued job's reason on
its row, so for the length of the sweep's transaction a claim that fitted the job returned
nothing while it sat queued, and nothing woke the claimer after. On SQLite, whose writers
take turns, the same scenario is a claim after the sweep: it must take the job there too.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import msgpack
import pytest

from dreamlake.lakeshore.plane.dispatch import open_store
from dreamlake.lakeshore.plane.queries import POSTGRES
from dreamlake.lakeshore.plane.store import SqlStore, schedulable
from dreamlake.lakeshore.types import Claim, SubmitRequest
from tests.support import claiming
from tests.support.postgres import postgres_schema

#: A request no live daemon could run (there is none), which the sweep names.
ASKS = {"cpus": 64}


@pytest.fixture(params=["postgres", "sqlite"])
def store(request: pytest.FixtureRequest) -> Iterator[SqlStore]:
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(postgres_schema()) if request.param == "postgres" else ":memory:"
        opened = open_store(url)
        stack.callback(opened.close)
        opened.ensure_namespace("default")
        yield opened


def _no_error_frame(*_: object) -> None:
    raise AssertionError("the sweep failed a job it should only have named")


def test_a_claim_that_fits_takes_a_job_while_the_sweep_names_it(store: SqlStore) -> None:
    (job,) = store.submit("default", "sweep-q", [SubmitRequest(msgpack.packb("x"), resources=ASKS)])
    postgres = store.connector.dialect is POSTGRES
    got = None
    with ThreadPoolExecutor(1) as pool, store.connector.transaction() as sweeping:
        # The sweep has written the job's reason and not committed yet.
        assert schedulable.sweep(sweeping, time.time(), _no_error_frame) == 1
        if postgres:  # a claim on another connection, beside the open sweep
            claim = pool.submit(
                claiming.store_claim_many, store, "default", ["sweep-q"], worker="w", free=ASKS
            )
            got = claim.result(timeout=30)
    if not postgres:  # SQLite's writers take turns: the claim comes after the sweep's commit
        got = claiming.store_claim_many(store, "default", ["sweep-q"], worker="w", free=ASKS)

    assert got is not None and [c.id for c in got] == [job]
    assert store.invocation("default", job).pending_reason is None  # a running job has none


def test_a_reservation_mark_goes_with_the_placed_attempt(store: SqlStore) -> None:
    """A worker reserving for the head marks it `resources`; once an attempt of it is placed,
    the mark is gone, so the job back in the queue (released, preempted) is no reserved head."""
    box = {"gpus_whole": 4, "gpu_share": 1.0, "gpu_names": ["NVIDIA H100"], "gpu_memory_gb": 80}
    (head,) = store.submit(
        "default", "reserve-q", [SubmitRequest(msgpack.packb("x"), resources={"gpus": 4})]
    )

    def claim(gpus_free: int) -> list[Claim]:
        free = {**box, "gpus_whole": gpus_free, "box": {**box, "whole_free_at": []}}
        return claiming.store_claim_many(store, "default", ["reserve-q"], worker="w", free=free)

    assert claim(2) == []  # reserves for the head, which needs all four
    assert store.invocation("default", head).pending_reason == "resources"
    (got,) = claim(4)
    store.place(got.id, got.lease, {"worker": "w", "gpus": [0, 1, 2, 3]})
    store.release(got.id, got.lease)

    back = store.invocation("default", head)
    assert back.state == "queued" and back.pending_reason is None


def test_a_sweep_older_than_a_reservation_mark_leaves_it(store: SqlStore) -> None:
    """A sweep reads the live workers first: one that began before a worker registered, claimed
    and reserved judges the head with no live worker. It must not write `waiting_for_capacity`
    over the newer mark (which no later sweep would put back). A sweep that began after the mark,
    and still sees no live worker, does: that reservation's worker is gone."""
    box = {"gpus_whole": 4, "gpu_share": 1.0, "gpu_names": ["NVIDIA H100"], "gpu_memory_gb": 80}
    (head,) = store.submit(
        "default", "stale-q", [SubmitRequest(msgpack.packb("x"), resources={"gpus": 4})]
    )
    began = time.time()
    free = {**box, "gpus_whole": 2, "box": {**box, "whole_free_at": []}}
    assert claiming.store_claim_many(store, "default", ["stale-q"], worker="w", free=free) == []

    with store.connector.transaction() as tx:
        assert schedulable.sweep(tx, began, _no_error_frame) == 0
    assert store.invocation("default", head).pending_reason == "resources"

    with store.connector.transaction() as tx:
        assert schedulable.sweep(tx, time.time(), _no_error_frame) == 1
    assert store.invocation("default", head).pending_reason == "waiting_for_capacity"
