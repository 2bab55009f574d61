"""Preemption notices in the worker core (issue 35): one "this box is going away" path.

Every source feeds `preempt()`: SIGTERM (systemd stop, a Kubernetes pod's termination, Slurm's
`--signal`), `lakeshore daemon drain NAME --preempt` (the worker row's state), an EC2 spot
interruption notice (daemon/spot.py). On a notice the worker stops claiming, tells every running
job (`dls.run.preempting`, `dls.run.on_preempt`, `dls.run.preempt_deadline`), and gives them
until the end of the grace (`preempt_grace_s`, never past the notice's own deadline) to
checkpoint and stop. A job that raises `dls.Preempted` goes back to the queue as a preemption;
one still running when the grace ends is killed and goes back the same way. A job that returns
in the grace has finished: its result is kept.

A rebalance recommendation is not a notice: `pause_claiming()` only stops taking new work.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import WorkerConfig
    from .slot import Slot


class Preemptible:
    """The notice state of a worker core (mixed into `WorkerCore`)."""

    config: WorkerConfig
    slots: list[Slot]
    _log: Any
    _free: threading.Condition

    def _init_notice(self) -> None:
        #: When the grace of a preemption notice ends (time.time()), once one came.
        self.preempt_until: float | None = None
        self._paused = threading.Event()

    def drain(self, reason: str = "requested") -> None:  # WorkerCore's
        raise NotImplementedError

    def preempt(self, reason: str, deadline: float | None = None) -> None:
        """The box is going away (by `deadline`, epoch seconds, when the notice says): stop
        claiming, tell every running job, give them the grace, then release what is left as
        preempted. A later notice may only bring the end of the grace closer."""
        grace_end = time.time() + self.config.preempt_grace_s
        until = grace_end if deadline is None else min(grace_end, deadline)
        with self._free:
            first = self.preempt_until is None
            if not first and until >= (self.preempt_until or until):
                return
            self.preempt_until = until
            slots = list(self.slots)
        self._log.warning(
            "worker.preempt_notice", reason=reason, deadline=deadline, grace_until=until
        )
        for slot in slots:
            slot.notice(until)
        self.drain(f"preempted: {reason}")

    def pause_claiming(self, reason: str) -> None:
        """Take no new work (a rebalance recommendation); running jobs carry on."""
        if not self._paused.is_set():
            self._log.warning("worker.claiming_paused", reason=reason)
            self._paused.set()

    @property
    def claiming_paused(self) -> bool:
        return self._paused.is_set()

    def _drain_deadline(self, started: float) -> float:
        """When a drain that began at `started` (monotonic) stops waiting for running jobs:
        `drain_timeout_s` after it, or the end of a notice's grace if that comes first (read
        again at each wake-up: a notice may come during a drain)."""
        end = started + float(self.config.drain_timeout_s)
        if self.preempt_until is not None:
            end = min(end, time.monotonic() + max(0.0, self.preempt_until - time.time()))
        return end
