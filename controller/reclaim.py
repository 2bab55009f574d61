"""Lost capacity: instances taken back without being asked, and the spot fallback they drive.

A provider lists an instance that ended or stopped without the controller asking (EC2: a spot
interruption, a host failure, a hand in the console) as `reclaimed`. It never counts against
the desired size, so the tick that first sees it launches its replacement; it is recorded once
as a `reclaimed` event and terminated (a stopped VM serves nothing and still costs its disk).

Each reclaim is remembered per target (a queue or a pool) for an hour. Once a target's
provider settings ask for spot and set `spot_fallback_after: N`, and N of its instances were
reclaimed within the hour, its launches go on-demand (`LaunchSpec.on_demand`) until the hour
holds fewer than N again; each switch is a `spot_fallback` event whose detail says which market
and why. The memory is the controller's own: a restarted controller starts on spot again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dreamlake.lakeshore.providers.base import Instance

#: How long a reclaim counts towards `spot_fallback_after`.
WINDOW_S = 3600.0


@dataclass
class Reclaims:
    #: instance id -> when it was first seen reclaimed (each counts once)
    seen: dict[str, float] = field(default_factory=dict)
    #: target key -> times of its reclaims within the window
    times: dict[str, deque[float]] = field(default_factory=dict)
    #: target key -> the market its last launch used ("spot" or "on-demand")
    market: dict[str, str] = field(default_factory=dict)

    def first_seen(self, target: str, inst: Instance, now: float) -> bool:
        """Count `inst` once for `target`; True the first time it is seen reclaimed."""
        if inst.id in self.seen:
            return False
        self.seen[inst.id] = now
        self.times.setdefault(target, deque()).append(now)
        return True

    def recent(self, target: str, now: float) -> int:
        times = self.times.get(target)
        while times and now - times[0] > WINDOW_S:
            times.popleft()
        return len(times or ())

    def forget_before(self, now: float) -> None:
        """Drop instance ids older than the window (the provider has stopped listing them)."""
        for inst_id in [i for i, at in self.seen.items() if now - at > 2 * WINDOW_S]:
            del self.seen[inst_id]

    def market_for(
        self, target: str, settings: Mapping[str, Any], now: float
    ) -> tuple[bool, dict[str, Any] | None]:
        """Whether `target`'s next launch goes on-demand, and the detail of a `spot_fallback`
        event when that differs from its last launch (None when nothing changed)."""
        after = settings.get("spot_fallback_after")
        if not settings.get("spot") or not isinstance(after, int) or isinstance(after, bool):
            return False, None
        count = self.recent(target, now)
        on_demand = count >= after
        market = "on-demand" if on_demand else "spot"
        before = self.market.get(target, "spot")
        self.market[target] = market
        if market == before:
            return on_demand, None
        why = (
            f"{count} instance(s) reclaimed within {WINDOW_S:g}s (spot_fallback_after={after}): "
            "launching on-demand"
            if on_demand
            else f"{count} reclaim(s) within {WINDOW_S:g}s, under spot_fallback_after={after}: "
            "back to spot"
        )
        return on_demand, {
            "market": market,
            "reclaims": count,
            "spot_fallback_after": after,
            "why": why,
        }
