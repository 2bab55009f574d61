"""Lazy FILO-queue handles: `from dreamlake.lakeshore.q.filo import preview`.

Each attribute is a `FILOQueue`; see `dreamlake.lakeshore.q`.
"""

from dreamlake.lakeshore.queue import FILOQueue as _FILOQueue

from . import _handle

_handles: dict[str, _FILOQueue] = {}


def __getattr__(attr: str) -> _FILOQueue:
    return _handle(_handles, __name__, attr, _FILOQueue)
