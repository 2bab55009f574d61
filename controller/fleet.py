"""Targets (a queue, or a pool of queues) and the instances that serve each, sorted by state.

`targets()` groups the snapshot's queues into what the controller sizes; `classify()` sorts one
target's instances into booting, serving (idle or busy), draining and to-terminate, with the
reason for each termination. Both are pure over a snapshot and a clock value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from dreamlake.lakeshore.providers.base import TAG_SPEC, Instance
from dreamlake.lakeshore.shapes import Shape

from .observe import Snapshot, WorkerRow
from .packing import Demand, Packing
from .policy import Policy, merge_pool


@dataclass
class Target:
    namespace: str
    key: str  # "queue/<name>" or "pool/<name>"
    queues: list[str]
    policy: Policy
    backlog: int = 0
    running: int = 0
    #: queue -> backlog + running, to pick the primary queue of a new pool worker
    demand_by_queue: dict[str, int] = field(default_factory=dict)
    note: str = ""
    #: Instances are ours but no queue wants them any more (deleted, renamed, set to none).
    orphaned: bool = False
    #: What the member queues' queued and running jobs ask for (issue 34).
    requests: list[Demand] = field(default_factory=list)
    #: Those requests packed onto the provider's launch shape, when it has one (loop.py).
    packing: Packing | None = None
    #: ... and that shape.
    shape: Shape | None = None

    @property
    def demand(self) -> int:
        """Daemons' worth of jobs to serve: with a launch shape, only those a launch could run;
        without, a gang's every part (each needs a daemon of its own)."""
        if self.packing is not None:
            return self.packing.jobs
        parts = sum((d.nodes - 1) * d.count for d in self.requests)
        return self.backlog + self.running + parts

    @property
    def widest_gang(self) -> int:
        """The most daemons one job asks for at once (1: no gang): the fewest to serve it, and
        the fewest to launch in one tick, so that a gang's daemons boot together."""
        return max((d.nodes for d in self.requests if d.count > 0), default=1)


def target_key(queue: str, policy: Policy) -> str:
    return f"pool/{policy.pool}" if policy.pool else f"queue/{queue}"


def targets(snap: Snapshot) -> dict[tuple[str, str], Target]:
    """(namespace, key) -> target, for every queue whose policy is not `none`."""
    grouped: dict[tuple[str, str], list[tuple[str, Policy, str]]] = {}
    for q in snap.queues:
        if not q.policy.managed:
            continue
        grouped.setdefault((q.namespace, target_key(q.name, q.policy)), []).append(
            (q.name, q.policy, q.state)
        )
    out = {}
    for (ns, key), members in grouped.items():
        live = [(name, pol) for name, pol, state in members if state != "archived"]
        policies = [pol for _, pol in live]
        t = Target(ns, key, sorted(name for name, _, _ in members), merge_pool(policies))
        if not live:  # every member archived: claims refuse them, nothing to serve
            t.policy = Policy(kind="fixed", max=0)
            t.note = "archived"
        if key.startswith("pool/"):
            launch = {(p.provider, tuple(sorted(p.match.items()))) for p in policies}
            if len(launch) > 1:
                t.note = "members disagree on provider/match; using the first member's"
        for name, _ in live:
            queued, running = snap.counts.get((ns, name), (0, 0))
            t.backlog += queued
            t.running += running
            t.demand_by_queue[name] = queued + running
            t.requests += snap.requests.get((ns, name), [])
        out[(ns, key)] = t
    return out


@dataclass
class Fleet:
    """One target's instances, sorted."""

    booting: list[Instance] = field(default_factory=list)
    idle: list[tuple[Instance, WorkerRow]] = field(default_factory=list)
    busy: list[tuple[Instance, WorkerRow]] = field(default_factory=list)
    draining: list[tuple[Instance, WorkerRow]] = field(default_factory=list)
    #: (instance, reason)
    terminate: list[tuple[Instance, str]] = field(default_factory=list)
    #: Taken back by the provider without being asked (controller/reclaim.py).
    reclaimed: list[Instance] = field(default_factory=list)
    #: Their daemon served, then left without being drained (a notice: the box is going away);
    #: the provider has `reclaim_grace_s` to report them reclaimed before they are terminated.
    leaving: list[Instance] = field(default_factory=list)
    #: Idle instances launched with another launch config than the target's now (sorted first
    #: in `idle`): the controller rolls them, one drain at a time.
    outdated: int = 0

    @property
    def current(self) -> int:
        """What counts against desired: booting and serving, not draining, leaving, reclaimed
        or doomed: lost capacity is replaced on the tick that sees it lost."""
        return len(self.booting) + len(self.idle) + len(self.busy)

    def primaries(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for _, w in [*self.idle, *self.busy]:
            if w.queues:
                out[w.queues[0]] = out.get(w.queues[0], 0) + 1
        return out


@dataclass(frozen=True)
class Timeouts:
    boot_s: float
    stale_s: float
    drain_s: float
    #: How long an instance whose daemon left on its own is left for its provider to reclaim
    #: (EC2 ends a spot instance two minutes after its notice), so the reclaim is seen as one.
    reclaim_grace_s: float = 180.0


def classify(
    instances: Sequence[Instance],
    workers: Mapping[tuple[str, str], WorkerRow],
    *,
    now: float,
    timeouts: Timeouts,
    drained_at: Mapping[str, float],
    spec_hash: str | None,
    idle_since: Mapping[str, float],
    served_at: Mapping[str, float] | None = None,
) -> Fleet:
    """Sort instances by what their worker row says; `drained_at` holds our drain requests,
    `served_at` when each instance was last seen with a live worker row."""
    fleet = Fleet()
    served_at = served_at or {}
    for inst in instances:
        if inst.state == "terminating":
            continue  # the provider is on it
        if inst.state == "reclaimed":
            fleet.reclaimed.append(inst)
            continue
        row = workers.get((inst.namespace, inst.daemon))
        if row is None:
            _without_row(fleet, inst, now, timeouts, drained_at, served_at)
        elif now - row.heartbeat_at > timeouts.stale_s:
            fleet.terminate.append(
                (inst, f"orphan: last worker heartbeat {now - row.heartbeat_at:.0f}s ago")
            )
        elif row.state == "draining":
            since = drained_at.get(inst.id, now)
            if now - since > timeouts.drain_s:
                fleet.terminate.append((inst, f"drain overran {timeouts.drain_s:g}s"))
            else:
                fleet.draining.append((inst, row))
        elif row.running > 0:
            fleet.busy.append((inst, row))
        else:
            fleet.idle.append((inst, row))

    def drain_order(pair: tuple[Instance, WorkerRow]) -> tuple[bool, float, str]:
        inst, row = pair
        outdated = spec_hash is not None and inst.tags.get(TAG_SPEC) != spec_hash
        return (not outdated, idle_since.get(inst.id, now), row.name)

    fleet.idle.sort(key=drain_order)
    fleet.outdated = sum(1 for pair in fleet.idle if not drain_order(pair)[0])
    return fleet


def _boot_overrun(inst: Instance, boot_s: float) -> str:
    if inst.state == "pending":
        why = f" ({inst.note})" if inst.note else ""
        return f"orphan: still pending {boot_s:g}s after launch{why}"
    return f"orphan: no worker heartbeat {boot_s:g}s after launch"


def _without_row(
    fleet: Fleet,
    inst: Instance,
    now: float,
    timeouts: Timeouts,
    drained_at: Mapping[str, float],
    served_at: Mapping[str, float],
) -> None:
    """An instance with no live worker row: drained and gone, left on its own, booting, or an
    orphan that never reported."""
    if inst.id in drained_at:
        fleet.terminate.append((inst, "drained: the daemon left"))
    elif inst.id in served_at:
        if now - served_at[inst.id] > timeouts.reclaim_grace_s:
            fleet.terminate.append(
                (
                    inst,
                    "its daemon left on its own and the provider did not reclaim it "
                    f"within {timeouts.reclaim_grace_s:g}s",
                )
            )
        else:
            fleet.leaving.append(inst)
    elif now - inst.launched_at > timeouts.boot_s:
        fleet.terminate.append((inst, _boot_overrun(inst, timeouts.boot_s)))
    else:
        fleet.booting.append(inst)


def pick_primaries(target: Target, fleet: Fleet, count: int) -> list[str]:
    """Primary queues for `count` new pool workers: where demand per primary worker is highest."""
    if len(target.queues) == 1 or not target.demand_by_queue:
        return [target.queues[0]] * count
    have = fleet.primaries()
    out = []
    for _ in range(count):
        best = max(
            sorted(target.demand_by_queue),
            key=lambda q: target.demand_by_queue[q] / (1 + have.get(q, 0)),
        )
        have[best] = have.get(best, 0) + 1
        out.append(best)
    return out
