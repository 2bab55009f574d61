"""`dls.run`: what a job body knows about the attempt it runs in, and its storage I/O.

    @dls.udf(queue="render")
    def render(scene: str) -> list[str]:
        with dls.scope(scene):                          # keys below are "<scene>/..."
            frames = dls.run.read("inputs/frames.bin")  # reads "<scene>/inputs/frames.bin"
            dls.run.post({"attempt": dls.run.attempt})  # a VALUE frame on this job's stream
            return [dls.run.write(f"out/{i}.png", png) for i, png in enumerate(draw(frames))]

Why: file bytes never ride the wire. A body writes what it produces to storage and returns the
keys; the producer reads them back with `dls.storage(url).read(key)`. `dls.run.id` and
`dls.run.attempt` let a body name its outputs per attempt, so a retried attempt never reads a
half-written output of the one before.

The context is set around the body by `execute.run_body`, so it is the same in the in-process
`run_worker` and in the daemon's child processes (whose storage is the daemon's `--storage`,
passed down as `LAKESHORE_STORAGE`). It lives in `contextvars`, so it follows the body into its
coroutines and async generators; a thread the body starts itself sees no job (`dls.run.id` is
None there) but still reads and writes the same default storage.

A long job survives losing its box (issue 35): `dls.run.checkpoint(state)` stores its state
durably and returns once it is safe, `dls.run.last_checkpoint()` gives it back on a later
attempt (None on the first), and `dls.run.preempting` (an event; `dls.run.on_preempt(fn)`,
`dls.run.preempt_deadline` in epoch seconds) says the box is going away: checkpoint, then
`raise dls.Preempted()`. docs/preemption.md shows the whole pattern.

Keys are relative to the current `dls.scope(...)` (scopes nest: `a` then `b` is `a/b`); a key
that starts with '/' ignores the scope. `write` returns the full key, which is what a body
returns to its producer. Outside any job the I/O functions work on the default storage, so the
same code runs in a notebook.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

from .attempt import AttemptLink
from .errors import DispatchError, InvalidArgument
from .job_context import SCOPE, JobContext, current, job
from .storage import Storage, check_key, join_key
from .storage import storage as open_storage

__all__ = [
    "JobContext",
    "checkpoint",
    "current",
    "exists",
    "job",
    "key",
    "last_checkpoint",
    "on_preempt",
    "open",
    "post",
    "progress",
    "read",
    "scope",
    "write",
]


#: Keys under these top-level prefixes belong to spill and the object store; bodies may not write
#: there (a body could otherwise overwrite another job's object).
_RESERVED = ("_spill/", "_objects/")


class NotInJob(DispatchError):
    code = "not_in_job"


@contextmanager
def scope(prefix: str) -> Iterator[str]:
    """Prefix every key in the block with `prefix` (nested scopes compose); yields the prefix.

    `prefix` is one or more key segments ("scene7", "runs/42"); the previous scope comes back
    when the block exits, also when it raises.
    """
    if not isinstance(prefix, str):
        raise InvalidArgument(f"a scope is a str of key segments, got {prefix!r}")
    full = join_key(SCOPE.get(), prefix)
    if full:
        check_key(full)
    token = SCOPE.set(full)
    try:
        yield full
    finally:
        SCOPE.reset(token)


def current_scope() -> str:
    """The key prefix in force ('' at the root)."""
    return SCOPE.get()


def key(name: str) -> str:
    """The full key `name` stands for here: under the current scope unless it starts with '/'."""
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"a storage key is a non-empty string, got {name!r}")
    full = name[1:] if name.startswith("/") else join_key(SCOPE.get(), name)
    if name.endswith("/"):
        raise InvalidArgument(f"storage key {name!r} names a folder, not an object")
    return check_key(full)


def _storage() -> Storage:
    ctx = current()
    return ctx.storage if ctx is not None else open_storage(None)


def _writable(name: str) -> str:
    full = key(name)
    if full.startswith(_RESERVED):
        raise InvalidArgument(
            f"keys under {' and '.join(_RESERVED)} are reserved for spilled payloads and objects"
        )
    return full


def read(name: str) -> bytes:
    """The bytes at `name` (scoped); `NotFound` if there is no such object."""
    return _storage().read(key(name))


def write(name: str, data: bytes | bytearray | memoryview | str) -> str:
    """Store `data` at `name` (scoped, atomically); returns the full key to hand back."""
    full = _writable(name)
    if isinstance(data, str):
        data = data.encode()
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidArgument(
            f"dls.run.write takes bytes (or str), got {type(data).__name__}; "
            "serialise it first, or return it as the job's result"
        )
    return _storage().write(full, data)


def open(name: str, mode: str = "rb") -> IO[Any]:
    """A stream on `name` (scoped): 'rb'/'r' to read, 'wb'/'w' to write.

    A write stream becomes the object only when it is closed without an exception, so a body
    that fails midway never leaves a torn output under the key.
    """
    full = _writable(name) if "w" in mode else key(name)
    return _storage().open(full, mode)


def exists(name: str) -> bool:
    return _storage().exists(key(name))


def post(value: Any = None) -> None:
    """Append a VALUE frame to this job's stream, as a generator body's `yield` does."""
    ctx = current()
    if ctx is None:
        raise NotInJob("dls.run.post works only inside a running job body")
    ctx.post(value)


def _link(verb: str) -> AttemptLink:
    ctx = current()
    if ctx is None:
        raise NotInJob(f"dls.run.{verb} works only inside a running job body")
    if ctx.link is None:
        raise NotInJob(
            f"dls.run.{verb} needs a worker that keeps checkpoints (lakeshore-daemon or "
            "run_worker); this body was run without one"
        )
    return ctx.link


def checkpoint(value: Any) -> None:
    """Store `value` as this job's state, durably; returns once it is safe (the last one wins).

    `value` is anything the codec carries (arrays, tensors, dicts of them, numbers, text). It
    goes to durable storage and only its Ref to the invocation row; a later attempt reads it
    back with `last_checkpoint()`. A value the codec cannot carry, or one the storage refuses
    (over its size limit), raises and leaves the previous checkpoint in place.
    """
    link = _link("checkpoint")
    from . import codec

    try:
        data = codec.encode(value)
    except InvalidArgument as exc:
        raise InvalidArgument(
            f"dls.run.checkpoint cannot store this value ({exc}); the last checkpoint stays"
        ) from None
    link.save(data)


def progress() -> None:
    """Say this job is moving (a training step done, a batch read): what a multi-node job's
    `hang_timeout_s` watches for, beside its frames and checkpoints (issue 47). Cheap enough to
    call every step: its worker hears it at most once a second. Outside a job, or under a
    worker that watches for no hang, it does nothing."""
    ctx = current()
    if ctx is not None and ctx.link is not None:
        ctx.link.progress()


def last_checkpoint() -> Any:
    """The state the last `checkpoint(value)` of this job stored, by this attempt or an
    earlier one; None when it has none (its first attempt, before any checkpoint)."""
    link = _link("last_checkpoint")
    if link.last is None:
        return None
    from . import spill

    return spill.loads(link.last)


def on_preempt(fn: Callable[[], Any]) -> None:
    """Call `fn` (on the worker's thread) when the box this job runs on is told it is going
    away; at once if it was told already. Keep it short: set a flag, save, return."""
    _link("on_preempt").on_preempt(fn)


#: What `dls.run.preempting` is outside a job, or under a worker that sends no notices.
_NEVER = threading.Event()
#: `dls.run.node_rank`, `.num_nodes`, `.node_addrs`: where a multi-node job's part stands.
_NODES = ("node_rank", "num_nodes", "node_addrs")


def _nodes(name: str) -> Any:
    """Read from the variables the part's daemon set (daemon/gang.py, `rendezvous`): 0, 1 and
    [] for a job of one box."""
    if name == "node_rank":
        return int(os.environ.get("LAKESHORE_NODE_RANK", "0"))
    if name == "num_nodes":
        return int(os.environ.get("LAKESHORE_NUM_NODES", "1"))
    addrs = os.environ.get("LAKESHORE_NODE_ADDRS", "")
    return addrs.split(",") if addrs else []


def __getattr__(name: str) -> Any:
    """`dls.run.id`, `.attempt`, `.queue` (None outside a job), `.gpus`, `.storage`, a gang's
    `.node_rank`, `.num_nodes` and `.node_addrs`, and the notice: `.preempting` (an event set
    when the box is going away) and `.preempt_deadline` (when, in epoch seconds; None until a
    notice, or when it named no time), read live."""
    if name == "gpus":  # a list, as `dls.run.gpus` documents; [] outside a placed job
        ctx = current()
        return list(ctx.gpus) if ctx is not None else []
    if name in ("id", "attempt", "queue"):
        ctx = current()
        return getattr(ctx, name) if ctx is not None else None
    if name == "storage":
        return _storage()
    if name in _NODES:  # a gang's part's rendezvous (issue 47); a one-box job is a gang of one
        return _nodes(name)
    if name in ("preempting", "preempt_deadline"):
        ctx = current()
        link = ctx.link if ctx is not None else None
        if name == "preempting":
            return link.preempting if link is not None else _NEVER
        return link.deadline if link is not None else None
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(
        [
            *globals(),
            *_NODES,
            "id",
            "attempt",
            "queue",
            "storage",
            "gpus",
            "preempting",
            "preempt_deadline",
        ]
    )
