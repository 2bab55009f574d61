"""A plane by reference: what a pickled queue handle or udf carries instead of its connections.

A job that submits to another udf carries that udf, and the udf its queue, and the queue its
plane: sockets, locks and a database connection that cannot be pickled and must not travel. They
travel as the plane's address instead (a SQLite path or a control plane URL, and a namespace;
never a token) and the worker opens its own: over HTTP it authenticates with its own token. A
handle on the process default plane travels as "the default", so a worker uses its own default.
An in-memory plane cannot leave its process: within it (run_worker threads) the same plane comes
back; anywhere else the unpickling says why it cannot.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from dreamlake.lakeshore.errors import InvalidArgument

from .base import Plane

_lock = threading.Lock()
_local: weakref.WeakValueDictionary[int, Plane] = weakref.WeakValueDictionary()
_opened: dict[tuple[str, str, str], Plane] = {}

#: ("dispatch", path, namespace) | ("http", url, namespace) | ("local", pid, id) | None
Reference = tuple[str, Any, Any] | None


def reference(plane: Plane | None) -> Reference:
    """How `plane` travels in a pickle (None: the default plane of whoever unpickles)."""
    if plane is None:
        return None
    url = getattr(plane, "url", None)
    if isinstance(url, str):
        return ("http", url, plane.namespace)
    target = getattr(plane, "target", None)
    if isinstance(target, str) and target not in (":memory:", "store"):
        return (
            "dispatch",
            os.path.abspath(target) if "://" not in target else target,
            plane.namespace,
        )
    with _lock:
        _local[id(plane)] = plane
    return ("local", os.getpid(), id(plane))


def resolve(ref: Reference) -> Plane | None:
    """The plane a reference names, opened once per process and shared by every handle."""
    if ref is None:
        return None
    kind, where, namespace = ref
    if kind == "local":
        plane = _local.get(namespace) if where == os.getpid() else None
        if plane is None:
            raise InvalidArgument(
                "a queue on an in-memory plane cannot leave its process: bind it to a file "
                "(dls.Dispatch(path)) or a control plane URL to use it from a job"
            )
        return plane
    key = (kind, str(where), str(namespace))
    with _lock:
        plane = _opened.get(key)
        if plane is None:
            from .default import open_plane

            if kind == "http":
                plane = open_plane(str(where), None, str(namespace))
            elif kind == "dispatch":
                from .dispatch import Dispatch

                plane = Dispatch(str(where), namespace=str(namespace))
            else:
                raise InvalidArgument(f"unknown plane reference {kind!r}")
            _opened[key] = plane
        return plane
