"""Gang claims (issue 47): how a claim hands out a part of a queue's gang, beside the store's
claims (claims.py asks here first when its queues hold a queued gang).

Per queue only one gang holds parts at a time: the one holding already, else the queue's
oldest claimable gang, when no one-box job the claimer could take comes before it in the
claim order. A worker that holds a part claims nothing else (`Held`), so every worker that can
run a part joins that one gang and two gangs never split a queue's workers between them. A
gang the queue's live daemons are too few to complete holds none of them (`_may_hold`); the
last part held starts the attempt (`_hold`). The rest of a gang's life is gangs.py's.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from dreamlake.lakeshore.plane.connector import Row, Transaction

from .base import WORKER_STALE_S
from .gangs import LIVE_PARTS
from .placement import fitted
from .records import gang_wait_s
from .reservation import fits
from .schedulable import asked, could_run, launches_of, serving

#: How long the retry of a failed gang keeps the daemon that failed first out, while enough
#: others could run it (`_may_hold`).
AVOID_S = 10.0


class Held(Exception):
    """The claimer holds a part of a gang not started yet: it claims nothing else."""


def queued(tx: Transaction, params: Mapping[str, Any], window: Row | None) -> bool:
    """Whether the claim's queues hold a queued gang: the queue row's `gangs` when the claim
    read it (`queue_for_claim`), else one probe of an index empty but for queued gangs."""
    if window is not None and "gangs" in window:
        return bool(window["gangs"])
    return tx.one("gangs_queued", ns=params["ns"], queues=params["queues"]) is not None


def claim_part(
    tx: Transaction, params: Mapping[str, Any], queues: Sequence[str], kind: str = "fifo"
) -> Row | None:
    """A part of the first of `queues` whose gang this claimer can take now, held for it, as
    a claimed row (`claim_of`); None: no part for it. Raises Held when the claimer holds a
    part already, so that it takes nothing else.

    A gang not holding yet takes its turn in the queue's claim order (`kind`): a one-box job
    before it that the claimer could take now is the claim's. Once a gang holds parts it is
    the queue's reservation: every worker that can run a part joins it before anything else."""
    now = params["now"]
    keys = {"ns": params["ns"], "now": now, "host": params.get("host")}
    for i, queue in enumerate(queues):
        # One round trip on Postgres for what a claim on a queue with a gang waiting always
        # asks: whether the claimer holds a part, the holding or the head gang, and the first
        # one-box job it could take instead.
        first = _first_single(params, queue, kind)
        found = tx.batch(
            [
                *([("gang_held_by", {"worker": params["worker"], **keys})] if i == 0 else []),
                ("gang_holding_in", {"queue": queue, **keys}),
                ("gang_head_in", {"queue": queue, **keys}),
                first,
            ]
        )
        if i == 0 and found.pop(0):
            raise Held
        holding, heads, singles = (rows[0] if rows else None for rows in found)
        head = holding or heads
        if holding is None and head is not None and _before(singles, head, kind):
            return None  # the claim takes that job
        if head is None or (fitted(params) and not fits(head, params)):
            continue  # only the queue's one gang may hold parts: none for this claimer here
        # What holding a part reads, in one round trip: the queue's live daemons, the job's
        # last failed attempt, the job locked (so two claims of one gang take turns), its live
        # gang with its parts, and the queue's admission.
        ids = {"id": head["id"]}
        workers, failed, locked, live, parts, queue_row = tx.batch(
            [
                ("live_workers_in", {"ns": head["namespace"], "since": now - WORKER_STALE_S}),
                ("gang_last_failed", ids),
                ("gang_lock", ids),
                ("gang_live", ids),
                ("gang_live_parts", ids),
                ("get_queue", {"ns": head["namespace"], "name": head["queue"]}),
            ]
        )
        if not locked or not _may_hold(tx, head, params["worker"], now, workers, failed):
            continue
        row = _hold(tx, head, params, locked[0], live, parts, queue_row)
        if row is not None:
            return row
    return None


def _first_single(
    params: Mapping[str, Any], queue: str, kind: str
) -> tuple[str, Mapping[str, Any]]:
    """The statement reading the first one-box job of `queue` the claimer could take now, in
    `kind` order (its `_fit` form when the claimer counts what it has free)."""
    keys = {k: v for k, v in params.items() if k not in ("queues", "worker", "expires", "addr")}
    name = "gang_first_single" + ("_newest" if kind == "filo" else "")
    return name + ("_fit" if fitted(params) else ""), {**keys, "queue": queue}


def _before(first: Row | None, head: Row, kind: str) -> bool:
    """Whether the one-box job `first` comes before the gang `head` in `kind` order."""
    if first is None:
        return False
    if first["priority"] != head["priority"]:
        return bool(first["priority"] > head["priority"])
    return bool(first["id"] > head["id"] if kind == "filo" else first["id"] < head["id"])


def _may_hold(
    tx: Transaction,
    head: Row,
    worker: str,
    now: float,
    workers: Sequence[Row],
    failed_rows: Sequence[Row],
) -> bool:
    """Whether `worker` may hold a part of `head`'s gang, as the queue's live daemons stand.

    Not when they are too few to complete it (each runs one part): holding would only stop
    them running other work until `gang_wait_s`; the job is named unschedulable instead. Not
    the daemon whose part ended the job's last failed attempt first, for AVOID_S after that
    end, while enough others could run it: a retry should not land on the bad box again, but
    the part that failed first is not always the bad one (a survivor's collective fails the
    moment its peer's box dies, and that box still looks live until its heartbeat is stale),
    so past AVOID_S it may join like any other. Workers that never registered (raw claims) are
    not counted: a fleet of none is not judged. `workers`: the live worker rows;
    `failed_rows`: the job's last failed attempt (`gang_last_failed`)."""
    offers = serving(workers, head["namespace"], head["queue"])
    if not offers:
        return True
    able = {o["name"] for o in offers if could_run(head, o)} | {worker}  # it fits (claim_part)
    nodes = int(head["nodes"])
    if len(able) < nodes:
        words = (
            f"gang of {nodes} parts, one per daemon: {len(able)} live daemon(s) on queue "
            f"'{head['queue']}' can run a part"
        )
        reason, launcher = "unschedulable", _launcher(tx, head)
        if launcher is not None:
            reason, words = "waiting_for_capacity", f"{words}; provider {launcher} launches more"
        tx.all("gang_too_few", id=head["id"], reason=reason, words=words, now=now)
        return False
    failed = failed_rows[0] if failed_rows else None
    return not (
        failed is not None
        and failed["failed_worker"] == worker
        and len(able - {worker}) >= nodes
        and now < float(failed["ended_at"] or 0.0) + AVOID_S
    )


def _launcher(tx: Transaction, head: Row) -> str | None:
    """The provider through which the controller launches daemons that could complete `head`'s
    gang (its policy's max holds all its parts, its launch shape runs a part), or None."""
    found = launches_of(tx, head["namespace"], head["queue"])
    if found is None:
        return None
    provider, shape = found
    queue = tx.one("get_queue", ns=head["namespace"], name=head["queue"])
    most = int(json.loads(queue["elasticity"] or "{}").get("max") or 0) if queue else 0
    if most < int(head["nodes"]) or (shape is not None and not shape.could_run(asked(head))):
        return None
    return provider


def _hold(
    tx: Transaction,
    head: Row,
    params: Mapping[str, Any],
    locked: Row,
    live_gang: Sequence[Row],
    parts: Sequence[Row],
    queue: Sequence[Row],
) -> Row | None:
    """Hold the lowest free rank of `head`'s gang for the claimer; start it when complete.
    `locked`, `live_gang`, `parts`, `queue`: what claim_part read for it, the job locked."""
    now, worker = params["now"], params["worker"]
    writes: list[tuple[str, Mapping[str, Any]]] = []
    gang: Mapping[str, Any]
    if live_gang:
        gang = live_gang[0]
    else:
        admission = json.loads(queue[0]["admission"]) if queue else {}
        gang = {
            "gang": secrets.token_hex(12),
            "attempt": int(locked["attempt"]) + 1,
            "nodes": int(head["nodes"]),
            "state": "holding",
            "wait_until": now + gang_wait_s(admission),
        }
        parts = []
        fields = {"ns": head["namespace"], "queue": head["queue"], "now": now}
        writes.append(
            (
                "gang_insert",
                {
                    "gang": gang["gang"],
                    "id": head["id"],
                    "attempt": gang["attempt"],
                    "nodes": gang["nodes"],
                    "wait_until": gang["wait_until"],
                    **fields,
                },
            )
        )
    if gang["state"] != "holding":
        return None
    live = [p for p in parts if p["state"] in LIVE_PARTS]
    nodes = int(gang["nodes"])
    free = sorted(set(range(nodes)) - {int(p["rank"]) for p in live})
    if not free or any(p["worker"] == worker for p in live):
        return None
    lease, rank, held = secrets.token_hex(16), free[0], len(live) + 1
    part = {"lease": lease, "gang": gang["gang"], "id": head["id"], "rank": rank}
    writes += [
        ("gang_part_insert", {**part, "worker": worker, "addr": params.get("addr"),
                              "expires": params["expires"], "now": now}),
        ("gang_set_held", {"gang": gang["gang"], "held": held}),
    ]  # fmt: skip
    if held == nodes:
        first = next((p for p in live if int(p["rank"]) == 0), None)
        lead = (
            (lease, params["expires"], worker)
            if first is None
            else (first["lease"], first["lease_expires_at"], first["worker"])
        )
        start = {"id": head["id"], "lease": lead[0], "expires": lead[1], "worker": lead[2]}
        writes += [
            ("gang_start", {**start, "now": now}),
            ("gang_started", {"gang": gang["gang"], "now": now}),
            ("gang_parts_started", {"gang": gang["gang"]}),
            ("unmark_pending", {"id": head["id"]}),
        ]
    else:
        words = f"gang: {held} of {nodes} parts held, waiting for the rest"
        writes.append(("gang_pending", {"id": head["id"], "words": words, "now": now}))
    tx.batch(writes)  # one round trip on Postgres
    return {
        **head,
        "attempt": gang["attempt"],
        "lease": lease,
        "lease_expires_at": params["expires"],
        "gang": {"rank": rank, "nodes": nodes, "attempt": gang["attempt"]},
    }
