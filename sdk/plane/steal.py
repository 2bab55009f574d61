"""Work stealing with a delay: a worker's first queue is its own, the others it helps with late.

A shared pool's workers carry every member queue (primary first). A job on a non-primary queue
whose elasticity sets `steal_delay_s` is left to that queue's own workers until it has waited
that long; only then may a worker of another primary take it. The delay is read from the queue
rows inside the claim's transaction, so it needs nothing from the daemon beyond the order of its
queues, and a PATCH of the delay applies at the next claim. A single-queue claim (the common case)
costs nothing extra.

Every way a worker gets a job (a claim, a batch for its prefetch, the claim an ack carries, a
held claim a submit hands its job to) goes through `stealing`, which says where a claim may take
from now, and `steal_aged`, which takes what has waited long enough: the rule is written once.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from typing import Any, NamedTuple

from .connector import Row, Transaction


class Stealing(NamedTuple):
    """Where one claim may take jobs from, each list in the claimer's order of queues."""

    #: Its primary queue and the others that set no delay: any claimable job, in claim order.
    free: list[str]
    #: The others, each with its delay: only a job that has waited that long, in fifo order.
    delayed: list[tuple[str, float]]


def steal_delays(tx: Transaction, ns: str, queues: list[str]) -> dict[str, float]:
    """{queue: steal_delay_s} for those of `queues` that set a positive delay."""
    rows = tx.all("steal_policies", ns=ns, names=queues)
    delays = {r["name"]: float(json.loads(r["elasticity"]).get("steal_delay_s", 0)) for r in rows}
    return {q: d for q, d in delays.items() if d > 0}


def stealing(tx: Transaction, ns: str, queues: Sequence[str], within: str | None) -> Stealing:
    """The steal rule for a claimer of `queues` (primary first), taking only from `within`
    (None: from any of them). `within` narrows where it takes, never which queue is its
    primary: a claim a submit hands one queue's jobs to is still that claimer's claim."""
    names = list(dict.fromkeys(q for q in queues if within is None or q == within))
    others = [q for q in names if q != queues[0]]
    delays = steal_delays(tx, ns, others) if others else {}
    return Stealing(
        [q for q in names if q not in delays], [(q, delays[q]) for q in names if q in delays]
    )


def steal_aged(
    tx: Transaction,
    params: dict[str, Any],
    delayed: list[tuple[str, float]],
    limit: int,
    *,
    fit: bool = False,
) -> list[Row]:
    """Up to `limit` jobs of `delayed` queues that have waited their delay, queue by queue in
    the claimer's order, each claimed under a lease of its own."""
    # The claim's own bindings but its queues and lease: the claimer's host, and what it has
    # free when it counts that (issue 34: then the `_fit` statement takes only what fits).
    bound = {k: v for k, v in params.items() if k not in ("queues", "lease")}
    name = "steal_aged_fit" if fit else "steal_aged"
    rows: list[Row] = []
    for queue, delay in delayed:
        aged = params["now"] - delay
        while len(rows) < limit:
            row = tx.one(name, queue=queue, aged=aged, lease=secrets.token_hex(16), **bound)
            if row is None:
                break
            rows.append(row)
    return rows
