"""Scaling arithmetic as pure functions: numbers in, numbers and a reason out.

Nothing here reads a clock, a store or a provider, so every rule is a row in a table-driven test.
The rules, with their prior art:

- demand = backlog + running; desired = ceil(demand / target_per_worker) within the policy's
  bounds (KEDA's formula). `fixed` holds `max`; `none` is never touched.
- `fully_elastic` activates 0 -> 1 on the first job (KEDA's activation) and returns to zero only
  after the queue was quiet (no backlog, nothing running) for `idle_s` (Ray's idle timeout).
- Scale up at once, but at most `surge` new workers per tick (Ray's upscaling_speed).
- Scale down only to the highest recommendation of the stabilisation window (Kubernetes HPA), and
  never before the controller has watched a whole window.
- Queues sharing a `pool` are one fleet sized on their summed demand (`merge_pool`).
- A global cap is shared out cheapest first (`cost_weight`, lower is cheaper) (`apply_cap`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: fully_elastic's quiet time before scaling to zero, when the policy does not say.
DEFAULT_IDLE_S = 300.0
#: Never launch fewer than this per tick when scaling up (a cold start of 0 -> N is not slow).
MIN_SURGE = 5
#: ... and otherwise up to this many times the current fleet per tick.
UPSCALING_SPEED = 1.0

KIND_ORDER = {"fixed": 0, "elastic": 1, "fully_elastic": 2}


@dataclass(frozen=True)
class Policy:
    """A queue's elasticity object, parsed, with the defaults filled in."""

    kind: str = "none"
    min: int = 0
    max: int = 0
    target_per_worker: float = 1.0
    idle_s: float = DEFAULT_IDLE_S
    provider: str | None = None
    pool: str | None = None
    match: Mapping[str, Any] = field(default_factory=dict)
    steal_delay_s: float = 0.0
    cost_weight: float = 1.0

    @classmethod
    def parse(cls, elasticity: Mapping[str, Any]) -> Policy:
        e = elasticity
        return cls(
            kind=str(e.get("kind", "none")),
            min=int(e.get("min", 0)) if e.get("kind") != "fully_elastic" else 0,
            max=int(e.get("max", 0)),
            target_per_worker=float(e.get("target_per_worker", 1.0)) or 1.0,
            idle_s=float(e.get("idle_s", DEFAULT_IDLE_S)),
            provider=e.get("provider"),
            pool=e.get("pool"),
            match=dict(e.get("match") or {}),
            steal_delay_s=float(e.get("steal_delay_s", 0.0)),
            cost_weight=float(e.get("cost_weight", 1.0)),
        )

    @property
    def managed(self) -> bool:
        return self.kind != "none"


def merge_pool(policies: Sequence[Policy]) -> Policy:
    """One policy for a pool's fleet, from its members' (`none` members never join a pool).

    The least elastic kind wins (fixed > elastic > fully_elastic: a pool scales to zero only if
    every member may); bounds are the widest (highest min and max), the target the strictest
    (lowest jobs per worker), idle_s the longest, cost_weight the highest. The launch spec
    (`provider`, `match`) is the first member's in name order: members of a pool are expected to
    agree on it, and the controller records a warning event when they do not.
    """
    managed = [p for p in policies if p.managed]
    if not managed:
        return Policy()
    first = managed[0]
    kind = min((p.kind for p in managed), key=lambda k: KIND_ORDER.get(k, 0))
    return Policy(
        kind=kind,
        min=max(p.min for p in managed) if kind != "fully_elastic" else 0,
        max=max(p.max for p in managed),
        target_per_worker=min(p.target_per_worker for p in managed),
        idle_s=max(p.idle_s for p in managed),
        provider=first.provider,
        pool=first.pool,
        match=first.match,
        steal_delay_s=max(p.steal_delay_s for p in managed),
        cost_weight=max(p.cost_weight for p in managed),
    )


def desired_workers(
    policy: Policy,
    demand: int,
    current: int,
    quiet_s: float,
    *,
    packed: tuple[int, str] | None = None,
    gang: int = 1,
) -> tuple[int, str]:
    """What the policy asks for now, before surge, stabilisation and the global cap.

    `demand` is backlog + running; `current` the fleet (booting included); `quiet_s` how long the
    queue (or pool) has had no demand at all. `packed`: the daemons the jobs' requests need on
    the provider's launch shape, and how that was found (controller/packing.py): then it, not
    demand / target_per_worker, is the need. `gang`: the most daemons one job needs at once
    (issue 47): fewer could never run it, whatever the target per worker.
    """
    if policy.kind == "none":
        return current, "unmanaged (elasticity none)"
    if policy.kind == "fixed":
        return policy.max, f"fixed at max={policy.max}"
    if packed is not None:
        need, how = packed
    else:
        need = math.ceil(demand / policy.target_per_worker) if demand > 0 else 0
        how = f"demand {demand} / target {policy.target_per_worker:g} -> {need}"
        if 0 < need < gang:
            need, how = gang, how + f"; a gang of {gang} parts needs {gang} daemons"
    if policy.kind == "elastic":
        want = min(policy.max, max(policy.min, need))
        return want, how + (f", within [{policy.min}, {policy.max}]" if want != need else "")
    # fully_elastic
    if demand > 0:
        want = min(policy.max, max(1, need))
        if current == 0:
            return want, f"activation: demand {demand} on an empty fleet -> {want}" + (
                f" ({how})" if packed is not None else ""
            )
        return want, how + (f", capped at max={policy.max}" if want != need else "")
    if quiet_s >= policy.idle_s:
        return 0, f"idle {quiet_s:.1f}s >= idle_s={policy.idle_s:g}: scale to zero"
    return min(current, policy.max), f"idle {quiet_s:.1f}s < idle_s={policy.idle_s:g}: hold"


def surge_limit(current: int, *, upscaling_speed: float = UPSCALING_SPEED) -> int:
    """The most workers one tick may add to a fleet of `current`."""
    return max(MIN_SURGE, math.ceil(current * upscaling_speed))


def stabilized(
    desired: int,
    current: int,
    recent: Sequence[int],
    *,
    watched_whole_window: bool,
) -> int:
    """Scale-down damping (HPA): the highest recommendation of the window, never below desired.

    `recent` holds the recommendations made within the window (this tick's excluded); before
    the controller has watched a whole window it does not scale down at all.
    """
    if desired >= current:
        return desired
    if not watched_whole_window:
        return current
    return min(current, max([desired, *recent]))


@dataclass(frozen=True)
class Want:
    key: str
    desired: int
    cost_weight: float = 1.0


def apply_cap(wants: Sequence[Want], cap: int | None) -> dict[str, int]:
    """Share `cap` workers out, cheapest targets first; ties go to the larger ask, then name."""
    if cap is None or sum(w.desired for w in wants) <= cap:
        return {w.key: w.desired for w in wants}
    out: dict[str, int] = {}
    left = cap
    for w in sorted(wants, key=lambda w: (w.cost_weight, -w.desired, w.key)):
        out[w.key] = min(w.desired, left)
        left -= out[w.key]
    return out


@dataclass(frozen=True)
class Step:
    """What one tick does to one fleet."""

    launch: int = 0
    drain: int = 0


def step(current: int, target: int, idle: int, surge: int) -> Step:
    """Up: launch within the surge. Down: drain idle workers only, never a busy one."""
    if target > current:
        return Step(launch=min(target - current, surge))
    if target < current:
        return Step(drain=min(current - target, idle))
    return Step()
