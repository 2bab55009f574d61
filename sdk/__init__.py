"""Lakeshore: a durable task queue for ML work.

import dreamlake.lakeshore as dls

q = dls.SyncQueue("gpu")
inv = q.submit({"x": 1})        # a durable string id
value = q.result(inv)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# `dls.storage` is the function (it shadows the module: import names from it with
# `from dreamlake.lakeshore.storage import ...`); `dls.run` is the in-job module (lazy, below).
from . import context
from .attempt import Preempted
from .codec import decode, encode
from .envelope import Envelope, Thunk, thunk
from .errors import DecodeError, DispatchError, QueueFullError
from .plane import Plane
from .queue import (
    BoltzmannQueue,
    FILOQueue,
    Job,
    Pool,
    PriorityQueue,
    Queue,
    SyncBoltzmannQueue,
    SyncFILOQueue,
    SyncPriorityQueue,
    SyncQueue,
    UnknownQueueWarning,
)
from .ref import Ref
from .storage import StorageRef, storage
from .topic import Topic
from .udf import UDF, udf

if TYPE_CHECKING:
    from . import run, spill
    from .ids import new_id
    from .objects import get, put
    from .plane.dispatch import Dispatch, LocalPlane
    from .plane.http import HttpDispatch, HttpPlane
    from .run import scope
    from .scheduling import schedule
    from .worker import run_worker
    from .workflow import output

__version__ = "0.4.0"

#: Imported on first use, not with the package: a producer script pays only for the plane it
#: opens. They weigh more than the rest of the package together (the SQL store and SQLite;
#: httpx and the CLI it loads when click is installed; the object store and python-ulid; the
#: worker core; `dls.run`, which only a job reads). Name -> (module, attribute).
_LAZY: dict[str, tuple[str, str | None]] = {
    "Dispatch": (".plane.dispatch", "Dispatch"),
    "LocalPlane": (".plane.dispatch", "LocalPlane"),
    "HttpDispatch": (".plane.http", "HttpDispatch"),
    "HttpPlane": (".plane.http", "HttpPlane"),
    "get": (".objects", "get"),
    "put": (".objects", "put"),
    "spill": (".spill", None),
    "run": (".run", None),
    "scope": (".run", "scope"),
    "run_worker": (".worker", "run_worker"),
    "output": (".workflow", "output"),
    "new_id": (".ids", "new_id"),
    "Runtime": (".runtime.spec", "Runtime"),
    "schedule": (".scheduling", "schedule"),
}


def __getattr__(name: str) -> Any:
    try:
        module, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    loaded = importlib.import_module(module, __name__)
    value = loaded if attribute is None else getattr(loaded, attribute)
    globals()[name] = value  # later look-ups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "UDF",
    "BoltzmannQueue",
    "DecodeError",
    "Dispatch",
    "DispatchError",
    "Envelope",
    "FILOQueue",
    "HttpDispatch",
    "HttpPlane",
    "Job",
    "LocalPlane",
    "Plane",
    "Pool",
    "Preempted",
    "PriorityQueue",
    "Queue",
    "QueueFullError",
    "Ref",
    "Runtime",
    "StorageRef",
    "SyncBoltzmannQueue",
    "SyncFILOQueue",
    "SyncPriorityQueue",
    "SyncQueue",
    "Thunk",
    "Topic",
    "UnknownQueueWarning",
    "__version__",
    "context",
    "decode",
    "encode",
    "get",
    "new_id",
    "output",
    "put",
    "run",
    "run_worker",
    "schedule",
    "scope",
    "spill",
    "storage",
    "thunk",
    "udf",
]
