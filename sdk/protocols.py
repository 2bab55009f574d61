"""Which pickle protocol a thunk is written in, and what a worker says when it cannot load one.

A thunk is cloudpickle bytes, and a pickle is only as portable as its protocol and, when it carries
functions by value, the bytecode inside it. A producer cannot know who will claim its job, but it
can ask who serves the queue: every worker advertises what it loads in its row
(`info["runtime"]`: Python, highest pickle protocol, cloudpickle), and the producer writes the
highest protocol all of the queue's live workers accept. It asks at most once per plane every
`PROTOCOL_TTL_S`, and only when a submit actually pickles something, so a submit stays one
request. With no worker known (a durable queue takes jobs while nobody serves it) it writes
`DEFAULT_PROTOCOL`, which every supported Python reads.

The producer also records what pickled the thunk beside the bytes (the envelope's
``pickled_by``), so a worker that cannot load it says both sides' versions, instead of a bare
``unsupported pickle protocol: 6`` or an ``ImportError`` that hides why. Bytecode pickled by
another Python minor version is refused before it is unpickled: it can load and then crash the
interpreter that runs it.

The codec never imports the plane: `codec.pickle_protocol` takes a function, and the submit
path passes `protocol_for` bound to its plane and queue.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from .errors import DecodeError, DispatchError

if TYPE_CHECKING:
    from .plane.base import Plane

__all__ = [
    "DEFAULT_PROTOCOL",
    "PROTOCOL_TTL_S",
    "ThunkLoadError",
    "pickled_by",
    "protocol_for",
    "runtime",
]

#: What a producer writes when no worker of its queue is known, and what every worker loaded
#: before protocols were negotiated: protocol 5 reads on every supported Python (3.8 and later).
DEFAULT_PROTOCOL: Final = 5
#: How long a producer trusts what it read of a plane's worker rows. Short, because a worker on
#: an older Python may join at any time; long enough that the read costs nothing per submit.
PROTOCOL_TTL_S: Final = 10.0
#: The lowest protocol worth honouring: cloudpickle needs 2 (every Python 3 reads at least 4),
#: so a smaller or non-integer value in a worker row is treated as no value at all.
MIN_PROTOCOL: Final = 2
#: Where a worker row (`WorkerInfo.info`) keeps what `runtime()` returns.
RUNTIME_KEY: Final = "runtime"
#: The byte pattern cloudpickle writes for a code object pickled by value (`types.CodeType`).
_BYTECODE_MARK: Final = b"CodeType"


class ThunkLoadError(DecodeError):
    """A thunk or udf call this worker cannot load; the message names the Python, pickle
    protocol and cloudpickle of the producer that wrote it and of this worker."""

    code = "thunk_load_error"


# -- what this process is ---------------------------------------------------------------------


def python_version() -> str:
    return "{}.{}.{}".format(*sys.version_info[:3])


def highest_protocol() -> int:
    import pickle  # imported where used, as the codec does, not with the SDK

    return pickle.HIGHEST_PROTOCOL


@functools.cache
def cloudpickle_version() -> str | None:
    try:
        import cloudpickle
    except ImportError:  # a server or controller install need not carry it
        return None
    return str(cloudpickle.__version__)


def runtime() -> dict[str, Any]:
    """What this process can load, as a worker row and `GET /v1/hello` advertise it."""
    return {
        "python": python_version(),
        "implementation": sys.implementation.name,
        "highest_pickle_protocol": highest_protocol(),
        "cloudpickle": cloudpickle_version(),
    }


@functools.cache
def pickled_by(protocol: int) -> dict[str, Any]:
    """The record a pickled thunk carries: who wrote it, so a worker can name both sides.

    Cached (it is written into every thunk submitted): treat the dict as read-only.
    """
    return {
        "python": python_version(),
        "implementation": sys.implementation.name,
        "protocol": protocol,
        "cloudpickle": cloudpickle_version(),
    }


# -- the producer: which protocol to write ------------------------------------------------------


@dataclass
class _Snapshot:
    """A plane's live workers as last read: each one's queues and highest protocol."""

    until: float
    workers: list[tuple[frozenset[str], int]]
    answers: dict[str, int] = field(default_factory=dict)


_SNAPSHOTS: weakref.WeakKeyDictionary[Any, _Snapshot] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def protocol_for(plane: Plane, queue: str) -> int:
    """The highest protocol every live worker of `queue` loads, capped at this Python's own;
    `DEFAULT_PROTOCOL` (capped likewise) when no worker of the queue is known."""
    snapshot = _snapshot(plane)
    answer = snapshot.answers.get(queue)
    if answer is None:
        answer = snapshot.answers[queue] = _lowest(snapshot.workers, queue)
    return answer


def forget(plane: Plane | None = None) -> None:
    """Drop what was read of `plane`'s workers (all planes': None): the next pickle reads again."""
    with _LOCK, contextlib.suppress(TypeError):  # TypeError: a plane never cached
        if plane is None:
            _SNAPSHOTS.clear()
        else:
            _SNAPSHOTS.pop(plane, None)


def _snapshot(plane: Plane) -> _Snapshot:
    now = time.monotonic()
    with _LOCK:
        snapshot = _cached(plane)
    if snapshot is not None and now < snapshot.until:
        return snapshot
    snapshot = _Snapshot(now + PROTOCOL_TTL_S, _live_workers(plane))
    # A plane that cannot be weakly referenced is read every time.
    with _LOCK, contextlib.suppress(TypeError):
        _SNAPSHOTS[plane] = snapshot
    return snapshot


def _cached(plane: Plane) -> _Snapshot | None:
    try:
        return _SNAPSHOTS.get(plane)
    except TypeError:
        return None


def _live_workers(plane: Plane) -> list[tuple[frozenset[str], int]]:
    """Alive workers with a recent heartbeat, as the store counts a queue's members.

    A plane that refuses the read (a token without the `read` or `work` scope) or cannot be
    reached gives no workers: the submit then writes the default, and that answer is kept for
    the TTL too, so a refusal costs one request per TTL, not one per submit.
    """
    from .plane.store.base import WORKER_STALE_S

    try:
        rows = plane.workers()
    except (DispatchError, OSError):
        return []
    now = time.time()
    return [
        (frozenset(w.queues), advertised(w.info))
        for w in rows
        if w.state == "alive" and now - w.heartbeat_at < WORKER_STALE_S
    ]


def advertised(info: Mapping[str, Any]) -> int:
    """The highest protocol a worker row says it loads; a row from before negotiation (or a
    value that makes no sense) says `DEFAULT_PROTOCOL`, which such workers always loaded."""
    runtime_info = info.get(RUNTIME_KEY)
    value = runtime_info.get("highest_pickle_protocol") if isinstance(runtime_info, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < MIN_PROTOCOL:
        return DEFAULT_PROTOCOL
    return value


def _lowest(workers: list[tuple[frozenset[str], int]], queue: str) -> int:
    from .types import DEFAULT_QUEUE

    serving = [
        p for queues, p in workers if queue in queues or (not queues and queue == DEFAULT_QUEUE)
    ]
    return min(min(serving, default=DEFAULT_PROTOCOL), highest_protocol())


# -- the worker: loading, and saying why not -----------------------------------------------------


def check_loadable(what: str, producer: Mapping[str, Any] | None, data: bytes) -> None:
    """Refuse, before unpickling, bytecode another Python wrote: it may load and then crash.

    Functions of an importable module pickle by name and load anywhere; a lambda, a closure or
    a function of `__main__` pickles its bytecode, which only the same implementation and minor
    version can run.
    """
    if producer is None or not isinstance(producer.get("python"), str):
        return
    if _minor(producer) == _minor(runtime()):
        return
    if _BYTECODE_MARK in data:
        raise ThunkLoadError(
            describe(
                what,
                producer,
                data,
                "it carries functions pickled by value (their bytecode), which only the same "
                "Python minor version can run; define them in a module both sides import, or "
                "run a worker on the producer's Python",
            )
        )


def load_failure(
    what: str, producer: Mapping[str, Any] | None, data: bytes, exc: BaseException
) -> ThunkLoadError:
    """The error a worker raises when `pickle.loads` failed, naming both sides' versions."""
    cause = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return ThunkLoadError(describe(what, producer, data, cause))


def describe(what: str, producer: Mapping[str, Any] | None, data: bytes, cause: str) -> str:
    """`could not unpickle thunk envelope: this thunk was pickled by ...; this worker runs ...:
    <cause>`."""
    noun = {"udf envelope": "udf call", "thunk envelope": "thunk"}.get(what, what)
    here = runtime()
    mine = (
        f"this worker runs {_python(here)} (highest protocol {here['highest_pickle_protocol']}, "
        f"cloudpickle {here['cloudpickle'] or 'not installed'})"
    )
    if producer is None:
        theirs = (
            f"this {noun} does not say which Python pickled it (pickle protocol "
            f"{_protocol_of(data)}, read from its bytes)"
        )
    else:
        theirs = (
            f"this {noun} was pickled by {_python(producer)} (pickle protocol "
            f"{producer.get('protocol', '?')}, cloudpickle {producer.get('cloudpickle') or '?'})"
        )
    return f"could not unpickle {what}: {theirs}; {mine}: {cause}"


def _python(side: Mapping[str, Any]) -> str:
    implementation = side.get("implementation")
    name = "Python" if implementation in (None, "cpython") else f"Python ({implementation})"
    return f"{name} {side.get('python', '?')}"


def _minor(side: Mapping[str, Any]) -> tuple[Any, str]:
    version = str(side.get("python", ""))
    return side.get("implementation", "cpython"), ".".join(version.split(".")[:2])


def _protocol_of(data: bytes) -> int | str:
    """A protocol 2+ pickle opens with PROTO: 0x80 and the protocol number."""
    if len(data) >= 2 and data[0] == 0x80:
        return data[1]
    return "0 or 1" if data else "?"
