"""Lazy queue handles by attribute: `from dreamlake.lakeshore.q import tutorial`.

An attribute is a queue name with `_` for `-` (`cpu_prep` -> "cpu-prep"); the handle is an
async `Queue` (its blocking twin is `.sync`), built on first access, cached, and bound to the
process-default plane (`.bind(plane)` for another). Nothing calls the plane until the first
submit; when that queue does not exist yet, the submit warns once (`UnknownQueueWarning`, with
close matches) and creates it, or raises under `LAKESHORE_STRICT_QUEUES=1`.

Kinds live in submodules: `q.priority` (PriorityQueue), `q.boltzmann` (BoltzmannQueue at
temperature 1.0), `q.filo` (FILOQueue). Those three names are therefore not fifo queues here;
write `Queue("priority")` for one. Every name in this package's namespace starts with `_` so
that no helper shadows a queue.
"""

import threading as _threading
from collections.abc import Callable as _Callable
from typing import TypeVar as _TypeVar

from dreamlake.lakeshore.errors import InvalidArgument as _InvalidArgument
from dreamlake.lakeshore.queue import Queue as _Queue

_Q = _TypeVar("_Q", bound=_Queue)
_SUBMODULES = ("priority", "boltzmann", "filo")
_lock = _threading.Lock()


def _handle(cache: dict[str, _Q], module: str, attr: str, make: _Callable[[str], _Q]) -> _Q:
    """The cached handle for attribute `attr` of `module`; AttributeError if not a queue name."""
    if attr.startswith("_"):
        raise AttributeError(f"module '{module}' has no attribute '{attr}'")
    with _lock:
        q = cache.get(attr)
        if q is None:
            try:
                q = make(attr.replace("_", "-"))
            except _InvalidArgument as exc:
                raise AttributeError(
                    f"'{attr}' is not a queue in '{module}': {exc} ('_' stands for '-')"
                ) from None
            q.sync.expect_row(missing="warn")
            cache[attr] = q
        return q


_handles: dict[str, _Queue] = {}


def __getattr__(attr: str) -> _Queue:
    if attr in _SUBMODULES:  # `from ...q import priority` is the submodule, not a queue
        import importlib

        return importlib.import_module(f"{__name__}.{attr}")  # type: ignore[return-value]
    return _handle(_handles, __name__, attr, _Queue)
