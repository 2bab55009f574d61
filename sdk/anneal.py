"""Annealing: a Boltzmann queue's temperature, lowered as a worker claims or as time passes.

A Boltzmann claim picks a job with probability proportional to exp(priority / T): a high T
explores (near uniform), T -> 0 exploits (strict priority). An anneal schedule starts at the
queue's `temperature` and lowers it, never below `min`:

    {"every_claims": 100, "factor": 0.9, "min": 0.05}   T = max(min, T0 * factor ** (claims // 100))
    {"half_life_s": 600, "min": 0.05}                   T = max(min, T0 * 0.5 ** (elapsed_s / 600))

`claims` counts the jobs this queue handle has claimed; `elapsed_s` runs from its first claim.
Both are the worker's own: temperature is chosen at claim time by the worker (the plane stores
no temperature), so each worker anneals on its own progress. The schedule is a pure function of
(claims, elapsed_s), which `Anneal.temperature` exposes for tests and plots.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import InvalidArgument

__all__ = ["Anneal", "AnnealState", "check_temperature"]

_CLAIMS_KEYS = frozenset({"every_claims", "factor", "min"})
_TIME_KEYS = frozenset({"half_life_s", "min"})


def check_temperature(temperature: object) -> float:
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not math.isfinite(temperature)
        or temperature < 0
    ):
        raise InvalidArgument(f"temperature must be a finite number >= 0, got {temperature!r}")
    return float(temperature)


def _number(spec: Mapping[str, Any], key: str) -> float:
    value = spec[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidArgument(f"anneal.{key} must be a finite number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Anneal:
    """One schedule: by claims (`every_claims` + `factor`) or by time (`half_life_s`)."""

    every_claims: int | None = None
    factor: float | None = None
    half_life_s: float | None = None
    min: float = 0.0

    @classmethod
    def parse(cls, spec: object, temperature: float) -> Anneal:
        """Check a schedule dict against the queue's starting `temperature`."""
        if isinstance(spec, Anneal):
            return spec
        if not isinstance(spec, Mapping):
            raise InvalidArgument(f"anneal must be a dict, got {type(spec).__name__}")
        keys = set(spec)
        by_claims, by_time = "every_claims" in keys, "half_life_s" in keys
        if by_claims == by_time:
            raise InvalidArgument(
                'anneal needs one schedule: {"every_claims": N, "factor": f, "min": m} '
                'or {"half_life_s": s, "min": m}'
            )
        allowed = _CLAIMS_KEYS if by_claims else _TIME_KEYS
        if keys - allowed:
            raise InvalidArgument(
                f"unknown anneal field(s) {', '.join(sorted(keys - allowed))}; "
                f"this schedule takes {', '.join(sorted(allowed))}"
            )
        floor = _number(spec, "min") if "min" in spec else 0.0
        if not 0 <= floor <= temperature:
            raise InvalidArgument(
                f"anneal.min must be between 0 and the temperature ({temperature}), got {floor}"
            )
        if by_time:
            half_life = _number(spec, "half_life_s")
            if half_life <= 0:
                raise InvalidArgument(f"anneal.half_life_s must be > 0, got {half_life}")
            return cls(half_life_s=half_life, min=floor)
        every = spec["every_claims"]
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise InvalidArgument(f"anneal.every_claims must be an integer >= 1, got {every!r}")
        if "factor" not in spec:
            raise InvalidArgument("anneal.every_claims needs a factor (0 < factor < 1)")
        factor = _number(spec, "factor")
        if not 0 < factor < 1:
            raise InvalidArgument(f"anneal.factor must be between 0 and 1, got {factor}")
        return cls(every_claims=every, factor=factor, min=floor)

    def temperature(self, t0: float, *, claims: int = 0, elapsed_s: float = 0.0) -> float:
        """The temperature after `claims` claims and `elapsed_s` seconds since the first."""
        if self.half_life_s is not None:
            t = t0 * float(0.5 ** (max(0.0, elapsed_s) / self.half_life_s))
        else:
            assert self.every_claims is not None and self.factor is not None  # parse()
            t = t0 * float(self.factor ** (max(0, claims) // self.every_claims))
        return max(self.min, t)

    def as_dict(self) -> dict[str, float | int]:
        if self.half_life_s is not None:
            return {"half_life_s": self.half_life_s, "min": self.min}
        assert self.every_claims is not None and self.factor is not None
        return {"every_claims": self.every_claims, "factor": self.factor, "min": self.min}


class AnnealState:
    """One queue handle's progress through its schedule: claims so far, clock since the first."""

    def __init__(
        self, schedule: Anneal, t0: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.schedule = schedule
        self.t0 = t0
        self.clock = clock
        self.claims = 0
        self.started: float | None = None
        self._lock = threading.Lock()

    def current(self) -> float:
        """The temperature the next claim uses; the first call starts the clock."""
        with self._lock:
            now = self.clock()
            if self.started is None:
                self.started = now
            return self.schedule.temperature(
                self.t0, claims=self.claims, elapsed_s=now - self.started
            )

    def peek(self) -> float:
        """The temperature the next claim would use, without starting the clock."""
        with self._lock:
            elapsed = 0.0 if self.started is None else self.clock() - self.started
            return self.schedule.temperature(self.t0, claims=self.claims, elapsed_s=elapsed)

    def claimed(self) -> None:
        with self._lock:
            self.claims += 1
