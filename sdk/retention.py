"""`trim`: retention from the SDK side, for any plane that offers it (embedded or HTTP).

The plane trims rows and journals and hands back the spilled refs of the invocations it deleted;
this deletes those objects too, here, where the storage credentials are (the producer's or
operator's environment), which the control plane may not have. Used by
`lakeshore queues prune --older-than 7d`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from .errors import DispatchError
from .plane.retention import Trimmed
from .spill import delete_refs

__all__ = ["RetentionPlane", "RetentionResult", "trim"]


@runtime_checkable
class RetentionPlane(Protocol):
    """A plane that can trim its namespace (`Dispatch`, `HttpDispatch`)."""

    def trim_retention(
        self,
        *,
        frames_older_than_s: float | None = None,
        invocations_older_than_s: float | None = None,
    ) -> Trimmed: ...


@dataclass
class RetentionResult:
    frames: int = 0
    invocations: int = 0
    #: Spilled objects deleted with their invocations.
    refs_deleted: int = 0
    #: One line per spilled object that could not be deleted (left behind as an orphan).
    problems: list[str] = field(default_factory=list)


def trim(
    plane: object,
    *,
    frames_older_than_s: float | None = None,
    invocations_older_than_s: float | None = None,
) -> RetentionResult:
    """Trim the plane's namespace and delete the spilled objects of the rows that went."""
    if not isinstance(plane, RetentionPlane):
        raise DispatchError(f"{type(plane).__name__} does not offer retention (trim_retention)")
    trimmed = plane.trim_retention(
        frames_older_than_s=frames_older_than_s,
        invocations_older_than_s=invocations_older_than_s,
    )
    problems = delete_refs(trimmed.refs)
    return RetentionResult(
        frames=trimmed.frames,
        invocations=trimmed.invocations,
        refs_deleted=len(trimmed.refs) - len(problems),
        problems=problems,
    )
