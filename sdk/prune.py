"""Pruning run queues: `lakeshore queues prune --older-than 7d`, as a plane-level operation.

A run queue (`@udf(..., scope="run")`, `q.for_run(run)`) is a queue row per run; a sweep leaves
one behind per run. `prune_run_queues` deletes those that are

- run queues: the name holds `-run-` and the row's description carries the run-queue mark that
  the SDK writes when it creates one (a hand-made queue called `dry-run-tests` is never touched);
- empty: no queued and no running invocation;
- idle: no activity newer than the cutoff. Activity is the row's `created_at` / `updated_at`
  (a run queue's handle touches its row at first use and then at most hourly while it submits),
  or, where the plane can answer it, `plane.last_activity(queue)`: the newest invocation.

It uses only the Plane protocol (`queues`, `count`, `delete_queue`), so it runs the same on the
embedded plane and over HTTP. Deleting a queue keeps its invocations: their results stay
readable by id. The check and the delete are two calls, not one transaction: a submit that lands
between them is cancelled by the delete, which is why prune only takes queues idle for the
whole cutoff.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from .context import RUN_INFIX
from .errors import Conflict, InvalidArgument, NotFound
from .plane.base import Plane
from .queue_rows import RUN_QUEUE_MARK
from .types import LIVE_STATES, QueueInfo

__all__ = ["PruneResult", "is_run_queue", "last_activity", "parse_duration", "prune_run_queues"]

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


@runtime_checkable
class ActivityProbe(Protocol):
    """A plane that can say when a queue last had an invocation (submitted or settled)."""

    def last_activity(self, queue: str) -> float | None: ...


@dataclass
class PruneResult:
    #: Queues deleted (or, with dry_run, that would be).
    pruned: list[str] = field(default_factory=list)
    #: Run queues left alone, with why.
    kept: dict[str, str] = field(default_factory=dict)


def parse_duration(text: str) -> float:
    """Seconds in "90", "90s", "30m", "12h", "7d" or "2w"."""
    match = _DURATION.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise InvalidArgument(
            f"invalid duration {text!r}: a number with an optional unit s, m, h, d or w (7d)"
        )
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def is_run_queue(info: QueueInfo) -> bool:
    return RUN_INFIX in info.name and info.description.startswith(RUN_QUEUE_MARK)


def last_activity(plane: Plane, info: QueueInfo) -> float:
    """When `info`'s queue was last seen in use (epoch seconds)."""
    seen = max(info.created_at, info.updated_at)
    if isinstance(plane, ActivityProbe):
        newest = plane.last_activity(info.name)
        if newest is not None:
            seen = max(seen, newest)
    return seen


def prune_run_queues(
    plane: Plane, *, older_than_s: float, now: float | None = None, dry_run: bool = False
) -> PruneResult:
    """Delete this namespace's run queues that are empty and idle for `older_than_s`."""
    if isinstance(older_than_s, bool) or not isinstance(older_than_s, (int, float)):
        raise InvalidArgument(f"older_than_s must be a number, got {older_than_s!r}")
    if older_than_s < 0:
        raise InvalidArgument(f"older_than_s must be >= 0, got {older_than_s}")
    now = time.time() if now is None else now
    cutoff = now - older_than_s
    result = PruneResult()
    for info in plane.queues():
        if info.namespace != plane.namespace or not is_run_queue(info):
            continue
        live = {state: plane.count(info.name, state) for state in LIVE_STATES}
        if any(live.values()):
            result.kept[info.name] = ", ".join(f"{n} {s}" for s, n in live.items() if n)
            continue
        seen = last_activity(plane, info)
        if seen > cutoff:
            result.kept[info.name] = f"active {_ago(now - seen)} ago"
            continue
        if not dry_run:
            try:
                plane.delete_queue(info.name)
            except NotFound:
                continue  # deleted by someone else meanwhile
            except Conflict as exc:  # member workers still list it
                result.kept[info.name] = str(exc)
                continue
        result.pruned.append(info.name)
    return result


def _ago(seconds: float) -> str:
    for unit in ("w", "d", "h", "m"):
        if seconds >= _UNITS[unit]:
            return f"{seconds / _UNITS[unit]:.1f}{unit}"
    return f"{max(seconds, 0.0):.0f}s"
