"""One tick's view of the plane, read in one transaction: queues, counts, workers, providers.

Four grouped reads over every namespace instead of one query per queue, so a tick over 1,000
queues and 10,000 worker rows stays a handful of statements (see bench/controller_tick.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from dreamlake.lakeshore.plane.providers import ProviderInfo
from dreamlake.lakeshore.plane.store.schedulable import asked
from dreamlake.lakeshore.types import WorkerInfo

from .packing import Demand
from .policy import Policy


@dataclass(frozen=True)
class QueueRow:
    namespace: str
    name: str
    state: str
    policy: Policy


@dataclass(frozen=True)
class WorkerRow:
    id: str
    namespace: str
    name: str
    queues: tuple[str, ...]
    state: str
    heartbeat_at: float
    running: int


@dataclass
class Snapshot:
    at: float
    queues: list[QueueRow] = field(default_factory=list)
    #: (namespace, queue) -> (queued, running)
    counts: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    #: (namespace, worker name) -> live (not gone) row
    workers: dict[tuple[str, str], WorkerRow] = field(default_factory=dict)
    #: (namespace, provider name) -> config
    providers: dict[tuple[str, str], ProviderInfo] = field(default_factory=dict)
    #: (namespace, queue) -> what its queued and running jobs ask for (issue 34), grouped
    requests: dict[tuple[str, str], list[Demand]] = field(default_factory=dict)


class FleetSource(Protocol):
    """What the controller reads and writes: `SqlStore` on the database, `HttpFleet` through a
    server's fleet routes (an admin token)."""

    def fleet(self) -> tuple[dict[str, list[dict[str, Any]]], list[ProviderInfo]]:
        """Queue, count, running and worker rows, and provider configs: one read per tick."""

    def set_worker_state(self, ns: str, ref: str, state: str) -> WorkerInfo: ...
    def record_events(
        self, events: Sequence[tuple[str, str, str, dict[str, Any]]], now: float
    ) -> None: ...


def observe(store: FleetSource, now: float | None = None) -> Snapshot:
    snap = Snapshot(at=time.time() if now is None else now)
    view, providers = store.fleet()
    queue_rows, count_rows = view["queues"], view["counts"]
    running_rows, worker_rows = view["running"], view["workers"]
    for r in queue_rows:
        snap.queues.append(
            QueueRow(
                r["namespace"], r["name"], r["state"], Policy.parse(json.loads(r["elasticity"]))
            )
        )
    counts: dict[tuple[str, str], list[int]] = {}
    for r in count_rows:
        slot = counts.setdefault((r["namespace"], r["queue"]), [0, 0])
        slot[0 if r["state"] == "queued" else 1] = int(r["n"])
    snap.counts = {k: (v[0], v[1]) for k, v in counts.items()}
    running = {(r["namespace"], r["worker"]): int(r["n"]) for r in running_rows}
    for r in worker_rows:
        key = (r["namespace"], r["name"])
        seen = snap.workers.get(key)
        if seen is not None and seen.heartbeat_at >= r["heartbeat_at"]:
            continue  # an older row of a replaced daemon
        snap.workers[key] = WorkerRow(
            id=r["id"],
            namespace=r["namespace"],
            name=r["name"],
            queues=tuple(json.loads(r["queues"])),
            state=r["state"],
            heartbeat_at=float(r["heartbeat_at"]),
            running=running.get(key, 0),
        )
    snap.providers = {(p.namespace, p.name): p for p in providers}
    snap.requests = _requests(view.get("shapes", []), snap.counts)
    return snap


def _requests(
    rows: Sequence[Mapping[str, Any]], counts: Mapping[tuple[str, str], tuple[int, int]]
) -> dict[tuple[str, str], list[Demand]]:
    """Requests per queue: the grouped rows, and the jobs that state none (the counts' rest).

    A gang's row is counted once among the plain requests (or the counts' rest) and again in a
    row of its own (`nodes` > 1): it is taken out of the first, so that it is one gang demand.
    """
    out: dict[tuple[str, str], dict[tuple[tuple[str, Any], ...], Demand]] = {}
    gangs: dict[tuple[str, str], list[Demand]] = {}
    stated: dict[tuple[str, str], int] = {}
    unstated_gangs: dict[tuple[str, str], int] = {}
    for r in rows:
        key = (r["namespace"], r["queue"])
        request, n, nodes = asked(r), int(r["n"]), int(r.get("nodes") or 1)
        if nodes > 1:
            gangs.setdefault(key, []).append(Demand(request, n, nodes))
            if r.get("stated", 1):
                _add(out.setdefault(key, {}), request, -n)
            else:
                unstated_gangs[key] = unstated_gangs.get(key, 0) + n
            continue
        _add(out.setdefault(key, {}), request, n)
        stated[key] = stated.get(key, 0) + n
    result: dict[tuple[str, str], list[Demand]] = {}
    for key, groups in out.items():
        result[key] = [d for d in groups.values() if d.count > 0]
    for key, (queued, running) in counts.items():
        plain = queued + running - stated.get(key, 0) - unstated_gangs.get(key, 0)
        if plain > 0:
            result.setdefault(key, []).append(Demand({}, plain))
    for key, found in gangs.items():
        result.setdefault(key, []).extend(found)
    return {k: v for k, v in result.items() if v}


def _add(
    groups: dict[tuple[tuple[str, Any], ...], Demand], request: Mapping[str, Any], n: int
) -> None:
    """Count `n` more (or fewer) jobs of `request` (the queued and running rows of one request
    are one demand)."""
    key = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in request.items()))
    seen = groups.get(key)
    groups[key] = Demand(request, n + (seen.count if seen is not None else 0))
