"""What a claim may take is written once, as the `claimable` fragment of sql/queries.sql, and
every claim statement says it through `{claimable}`: none can drift from the others, as
`claim_level` (a boltzmann claim's pick within a priority level) did when it alone lacked the
deadline test and handed out a job past its `deadline_cutoff_s`.
"""

from __future__ import annotations

import re
import secrets
import time
from importlib import resources
from typing import Any

import msgpack
import pytest

from dreamlake.lakeshore.plane.queries import POSTGRES, SQLITE, expand_fragments, queries
from dreamlake.lakeshore.plane.store import SqlStore
from dreamlake.lakeshore.types import SubmitRequest
from tests.support import claiming
from tests.unit import test_handoff

store = test_handoff.store  # the fixture: a SQLite file plane with namespace `default`

#: Every statement that picks claimable jobs, with what each binds beyond the claimable words.
CLAIMING: dict[str, dict[str, Any]] = {
    "claim_fifo": {},
    "claim_fifo_batch": {"limit": 5},
    "claim_filo": {},
    "claim_level": {"priority": 0.0},
    "priority_levels": {},
    "steal_aged": {"queue": "q", "aged": 1e12},
    # issue 34's reservation: the head a worker reserves for, and what may backfill meanwhile
    "queued_head": {},
    "claim_backfill": {"start_bound": 1e12},
    # issue 35: a preempted job is claimed next among its priority (its id, by claim_by_id)
    "resumed_head": {"priority": 0.0},
    "claimable_above": {"priority": -1.0},
    # issue 45: the jobs a reservation holds back, named by the claim that makes it
    "hold_back": {"queue": "q", "head": "", "reason": "reserved_for:x", "words": "", "limit": 9},
    # issue 47: the first one-box job a claimer could take, against the queue's head gang
    "gang_first_single": {"queue": "q"},
    "gang_first_single_newest": {"queue": "q"},
}
#: The statements of CLAIMING that claim nothing (the others claim what they pick).
READING = (
    "priority_levels",
    "queued_head",
    "resumed_head",
    "claimable_above",
    "hold_back",
    "gang_first_single",
    "gang_first_single_newest",
)


def _raw_statements() -> dict[str, str]:
    return dict(
        re.findall(
            r"^-- name: *(\S+)\n(.*?)(?=^-- (?:name|fragment):|\Z)",
            resources.files("dreamlake.lakeshore.plane").joinpath("sql/queries.sql").read_text(),
            re.MULTILINE | re.DOTALL,
        )
    )


def test_every_claim_statement_names_the_fragment_and_repeats_none_of_it() -> None:
    raw = _raw_statements()
    claiming = {name for name, body in raw.items() if "{claimable}" in body}

    assert claiming == set(CLAIMING)
    for name in claiming:
        assert "deadline_at" not in raw[name] and "locality_until" not in raw[name], name
    for dialect in (SQLITE, POSTGRES):
        for name in claiming:
            text = queries(dialect)[name]
            assert "{claimable}" not in text and "deadline_at >= :now" in text, name


def test_a_fragment_is_expanded_wherever_a_section_names_it() -> None:
    text = (
        "-- fragment: fresh\n-- why it is shared\nage < :limit\n\n"
        "-- name: one\nSELECT 1 FROM t WHERE {fresh};\n\n"
        "-- name: two\nDELETE FROM t WHERE NOT ({fresh}) {skip_locked};\n"
    )

    assert expand_fragments(text) == {
        "one": "SELECT 1 FROM t WHERE age < :limit;",
        "two": "DELETE FROM t WHERE NOT (age < :limit) {skip_locked};",
    }
    with pytest.raises(ValueError, match="dialect words"):
        expand_fragments("-- fragment: blob\nx\n\n-- name: one\nSELECT {blob};\n")


def test_a_fragment_names_the_fragments_above_it() -> None:
    text = (
        "-- fragment: fresh\nage < :limit\n\n"
        "-- fragment: pick\nSELECT id FROM t WHERE {fresh} {fits}\n\n"
        "-- name: one\n{pick};\n"
    )

    assert expand_fragments(text) == {"one": "SELECT id FROM t WHERE age < :limit {fits};"}


def _late_job(store: SqlStore) -> tuple[str, float]:
    """A job on queue `q` and its deadline."""
    store.create_queue("default", "q", admission={"deadline_cutoff_s": 30})
    # a timeout_s, so that a backfill (which takes only a job that surely ends) may take it
    # and a request, which a job must state for a reservation to name it held back
    late = SubmitRequest(payload=msgpack.packb(1), timeout_s=10.0, resources={"cpus": 1})
    (inv_id,) = store.submit("default", "q", [late])
    return inv_id, store.invocation("default", inv_id).created_at + 30


@pytest.mark.parametrize("name", sorted(CLAIMING))
def test_every_claim_statement_passes_by_a_job_past_its_deadline(
    store: SqlStore, name: str
) -> None:
    inv_id, deadline = _late_job(store)
    if name == "resumed_head":  # it finds only a job a preemption requeued
        (claim,) = claiming.store_claim_many(
            store, "default", ["q"], worker="w0", limit=1, lease_s=60
        )
        assert store.release(claim.id, claim.lease, outcome="preempted")
    params = {"ns": "default", "queues": ["q"], "host": None, **CLAIMING[name]}
    if name not in READING:
        params |= {"lease": secrets.token_hex(16), "expires": deadline + 120, "worker": "w1"}
    if name == "steal_aged":
        del params["queues"]

    def picked(now: float) -> list[Any]:
        with store.connector.transaction() as tx:
            return [dict(r) for r in tx.all(name, now=now, **params)]

    assert picked(deadline + 1) == []  # past it: still queued until a sweep ends it
    assert len(picked(deadline - 1)) == 1  # before it, the same statement takes it
    if name not in READING:
        assert store.invocation("default", inv_id).state == "running"


def test_a_boltzmann_claim_between_sweeps_passes_by_a_job_past_its_deadline(
    store: SqlStore,
) -> None:
    """A job past its deadline stays `queued` until a sweep ends it; a claim in between (a
    claim sweeps at most every SWEEP_EVERY_S) must pass it by, whatever its kind."""
    cutoff = 0.2
    store.create_queue("default", "b", kind="boltzmann", admission={"deadline_cutoff_s": cutoff})
    (late,) = store.submit("default", "b", [SubmitRequest(payload=msgpack.packb("late"))])
    missed = store.invocation("default", late).created_at + cutoff
    give_up = time.monotonic() + 10
    while time.time() <= missed:  # the deadline is on the wall clock
        assert time.monotonic() < give_up
    store.patch_queue("default", "b", {"admission": {"deadline_cutoff_s": 60}})
    (fresh,) = store.submit("default", "b", [SubmitRequest(payload=msgpack.packb("fresh"))])
    store._swept_at = time.time()  # a sweep a moment ago: this claim does not sweep

    claims = claiming.store_claim_many(store, "default", ["b"], worker="w1", limit=1, lease_s=60)

    assert [c.id for c in claims] == [fresh]
    assert store.invocation("default", late).state == "queued"  # for the next sweep to end


@pytest.mark.parametrize("dialect", [SQLITE, POSTGRES], ids=["sqlite", "postgres"])
def test_every_claim_statement_returns_what_a_claim_is_read_from(dialect: Any) -> None:
    """Every statement that takes a job returns the same columns (`{claimed_columns}`): the
    filo resumed-head claim (`claim_by_id`) once returned no `inputs`, so a preempted job whose
    arguments take a parent's result (`dls.output`) would have been handed none."""
    # gang_start starts a gang's attempt once all its parts are held; each part was handed
    # out, as a claim of `{claimed_columns}`, when it was held (store/gangs.py).
    taking = {
        name: sql
        for name, sql in queries(dialect).items()
        if "state = 'running', attempt = attempt + 1" in sql and name != "gang_start"
    }
    assert "claim_by_id" in taking and len(taking) >= 8
    returned = {name: sql.split("RETURNING", 1)[1].strip() for name, sql in taking.items()}
    assert len(set(returned.values())) == 1, returned
    assert all("inputs" in cols for cols in returned.values())
