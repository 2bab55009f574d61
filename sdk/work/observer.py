"""Observers: what the owner of a worker watches without subclassing the worker core.

The core calls each observer at the four moments a watcher cares about, as dramatiq's
middleware hears of a message's life: a claim answered, leases renewed, a plane call failed, a
job's run ended. The daemon's Prometheus figures (daemon/metrics.py) and its resource ledger
(daemon/placement.py) are observers; an embedding program may add its own through
`WorkerCore(observers=...)`.

A hook runs on the thread that did the thing (the claim loop, the lease loop, a slot), so it must
be quick. A hook that raises is logged and dropped: a watcher never stops the work it watches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dreamlake.lakeshore.types import Claim
from dreamlake.lakeshore.work.slot import Outcome

__all__ = ["Observers", "WorkerObserver"]


class WorkerObserver:
    """Override the hooks you need; each default does nothing."""

    def claimed(self, claims: Sequence[Claim]) -> None:
        """A claim call answered with `claims` (empty: a long-poll that found nothing)."""

    def renewed(self, held: int) -> None:
        """The plane renewed the leases of the `held` jobs this worker holds, running or
        buffered (called only when it holds some)."""

    def plane_error(self, call: str, kind: str) -> None:
        """A plane call failed: `kind` is "unreachable" (it will be retried) or "refused" (the
        plane answered no; the call is dropped). `call` names it: "claim", "renew", ..."""

    def job_ended(self, claim: Claim, outcome: Outcome, run_s: float) -> None:
        """An attempt's run ended, however it ended, after `run_s` seconds in its slot; its
        settle follows."""


class Observers(WorkerObserver):
    """The worker's observers as one: each hook is passed to every observer in order."""

    def __init__(self, observers: Sequence[WorkerObserver], log: Any) -> None:
        self._observers = list(observers)
        self._log = log

    def add(self, observer: WorkerObserver) -> None:
        """Add one before `run()` (the daemon adds its ledger once it has found its GPUs)."""
        self._observers.append(observer)

    def claimed(self, claims: Sequence[Claim]) -> None:
        self._each("claimed", claims)

    def renewed(self, held: int) -> None:
        self._each("renewed", held)

    def plane_error(self, call: str, kind: str) -> None:
        self._each("plane_error", call, kind)

    def job_ended(self, claim: Claim, outcome: Outcome, run_s: float) -> None:
        self._each("job_ended", claim, outcome, run_s)

    def _each(self, hook: str, *args: Any) -> None:
        for observer in self._observers:
            try:
                getattr(observer, hook)(*args)
            except Exception as exc:
                self._log.error(
                    "worker.observer_failed",
                    observer=type(observer).__name__,
                    hook=hook,
                    error=repr(exc),
                )
