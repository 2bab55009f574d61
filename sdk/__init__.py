"""Lakeshore: a durable task queue for ML work.

import dreamlake.lakeshore as dls

q = dls.SyncQueue("gpu")
inv = q.submit({"x": 1})        # a durable string id
value = q.result(inv)
"""

# `dls.storage` is the function (it shadows the module: import names from it with
# `from dreamlake.lakeshore.storage import ...`); `dls.run` is the in-job module.
from . import context, run, spill
from .codec import decode, encode
from .envelope import Envelope, Thunk, thunk
from .errors import DecodeError, DispatchError, QueueFullError
from .objects import get, put
from .plane import Dispatch, HttpDispatch, Plane
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
from .run import scope
from .storage import StorageRef, storage
from .topic import Topic
from .udf import UDF, udf
from .worker import run_worker

__version__ = "0.4.0"

__all__ = [
    "UDF",
    "BoltzmannQueue",
    "DecodeError",
    "Dispatch",
    "DispatchError",
    "Envelope",
    "FILOQueue",
    "HttpDispatch",
    "Job",
    "Plane",
    "Pool",
    "PriorityQueue",
    "Queue",
    "QueueFullError",
    "Ref",
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
    "put",
    "run",
    "run_worker",
    "scope",
    "spill",
    "storage",
    "thunk",
    "udf",
]
