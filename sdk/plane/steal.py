"""Work stealing with a delay: a worker's first queue is its own, the others it helps with late.

A shared pool's workers carry every member queue (primary first). A job on a non-primary queue
whose elasticity sets `steal_delay_s` is left to that queue's own workers until it has waited
that long; only then may a worker of another primary take it. The delay is read from the queue
rows inside the claim's transaction, so it needs nothing from the daemon beyond the order of its
queues, and a PATCH of the delay applies at the next claim. A single-queue claim (the common case)
costs nothing extra.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .connector import Row, Transaction


def steal_delays(tx: Transaction, ns: str, queues: list[str]) -> dict[str, float]:
    """{queue: steal_delay_s} for those of `queues` that set a positive delay."""
    rows = tx.all("steal_policies", ns=ns, names=queues)
    delays = {r["name"]: float(json.loads(r["elasticity"]).get("steal_delay_s", 0)) for r in rows}
    return {q: d for q, d in delays.items() if d > 0}


def claim_with_steal_delay(
    tx: Transaction, params: dict[str, Any], claim: Callable[[dict[str, Any]], Row | None]
) -> Row | None:
    """`claim(params)` over the queues free to take now; then the oldest aged job elsewhere."""
    queues: list[str] = params["queues"]
    if len(queues) < 2:
        return claim(params)
    delays = steal_delays(tx, params["ns"], queues[1:])
    if not delays:
        return claim(params)
    row = claim({**params, "queues": [q for q in queues if q not in delays]})
    if row is not None:
        return row
    keys = ("ns", "now", "lease", "expires", "worker", "host")
    for queue in queues[1:]:
        if queue in delays:
            aged = params["now"] - delays[queue]
            row = tx.one("steal_aged", queue=queue, aged=aged, **{k: params[k] for k in keys})
            if row is not None:
                return row
    return None
