"""Lazy priority-queue handles: `from dreamlake.lakeshore.q.priority import urgent`.

Each attribute is a `PriorityQueue` (priority_field "priority"); see `dreamlake.lakeshore.q`.
"""

from dreamlake.lakeshore.queue import PriorityQueue as _PriorityQueue

from . import _handle

_handles: dict[str, _PriorityQueue] = {}


def __getattr__(attr: str) -> _PriorityQueue:
    return _handle(_handles, __name__, attr, _PriorityQueue)
