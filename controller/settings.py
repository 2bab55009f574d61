"""What a `Controller` is configured with and what it remembers between ticks.

Kept apart from loop.py (which decides) and act.py (which acts), which both read them: the
loop builds the controller that inherits the acting, so neither may import the other's state.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from dreamlake.lakeshore.plane.providers import ProviderInfo
from dreamlake.lakeshore.plane.store import WORKER_STALE_S
from dreamlake.lakeshore.providers.base import Provider

from .fleet import Target
from .reclaim import Reclaims
from .sightings import Sightings

#: How the controller makes the provider a row names (tests give a fake).
ProviderFactory = Callable[[ProviderInfo], Provider]


@dataclass(frozen=True)
class Settings:
    interval_s: float = 5.0
    max_workers: int | None = None
    #: elastic / fixed: how long a lower size must be recommended before scaling down (HPA).
    #: fully_elastic uses its own idle_s instead.
    scale_down_window_s: float = 300.0
    boot_timeout_s: float = 600.0
    drain_timeout_s: float = 1800.0
    #: How long an instance whose daemon left on its own waits for its provider to reclaim it
    #: before the controller terminates it (EC2 takes a spot instance 2 min after its notice).
    reclaim_grace_s: float = 180.0
    stale_s: float = WORKER_STALE_S
    upscaling_speed: float = 1.0
    #: How launched daemons reach the plane: an http(s) URL, or the SQLite file path.
    plane_url: str | None = None
    plane_token: str | None = None


@dataclass
class Memory:
    """What the controller remembers between ticks (rebuilt from scratch after a restart)."""

    history: dict[str, deque[tuple[float, int]]] = field(default_factory=dict)
    quiet_since: dict[str, float] = field(default_factory=dict)
    idle_since: dict[str, float] = field(default_factory=dict)
    drained_at: dict[str, float] = field(default_factory=dict)
    #: instance id -> (its target, its daemon) for our drains, until we see the instance end
    drained: dict[str, tuple[Target, str]] = field(default_factory=dict)
    last_desired: dict[str, int] = field(default_factory=dict)
    last_error: dict[str, str] = field(default_factory=dict)
    sightings: Sightings = field(default_factory=Sightings)
    #: instance id -> when its worker row was last seen live
    served_at: dict[str, float] = field(default_factory=dict)
    reclaims: Reclaims = field(default_factory=Reclaims)
