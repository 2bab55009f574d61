"""`SyncQueue` holds every verb; `Queue` is its async sibling and offloads to a thread.

A queue object is only a name bound to a plane and a claim order: it holds no state of the
queue itself, so any number of them, in any process, see the same rows.

The typed subclasses fix a kind and take only that kind's arguments: `PriorityQueue`
(`priority_field`), `BoltzmannQueue` (`temperature`, `anneal`), `FILOQueue`, each with its
blocking twin (`SyncPriorityQueue`, ...). Constructing any of them never calls the plane; what
the first submit checks or writes on the queue row is `queue_rows.RowSpec`.

`SyncQueue` itself is in sync_queue.py, a job's wire form in queue_jobs.py and the kind-only
arguments' checks in queue_args.py; every name is importable from here, as it always was.
"""

from __future__ import annotations

import copy
import inspect
import warnings
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, NoReturn, ParamSpec, TypeVar

from .envelope import Envelope
from .errors import InvalidArgument
from .plane.base import Plane
from .queue_args import (
    KIND_ARGUMENTS,
    check_priority_field,
    misplaced_argument,
    payload_field,
    refuse_arguments,
    wire_name,
)
from .queue_handle import DERIVED_CACHE
from .queue_jobs import (
    DEFAULT_LEASE_S,
    Job,
    encode_submit,
    result_of,
    worker_identity,
)
from .queue_rows import UnknownQueueWarning
from .sync_queue import SyncQueue
from .topic import Topic

if TYPE_CHECKING:
    from .mapping import MapResults
    from .runtime.spec import Runtime

#: Every name callers import from here, those that moved to queue_jobs.py, queue_args.py and
#: sync_queue.py (issue 38) included.
__all__ = [
    "DEFAULT_LEASE_S",
    "DERIVED_CACHE",
    "KIND_ARGUMENTS",
    "BoltzmannQueue",
    "FILOQueue",
    "Job",
    "Pool",
    "PriorityQueue",
    "Queue",
    "SyncBoltzmannQueue",
    "SyncFILOQueue",
    "SyncPriorityQueue",
    "SyncQueue",
    "UnknownQueueWarning",
    "check_priority_field",
    "encode_submit",
    "misplaced_argument",
    "payload_field",
    "refuse_arguments",
    "result_of",
    "wire_name",
    "worker_identity",
]

#: A pickle (a handle inside a thunk, a Job) names these classes where callers import them,
#: as before they moved: a worker on an earlier release still finds them.
SyncQueue.__module__ = Job.__module__ = __name__

P = ParamSpec("P")
_AQ = TypeVar("_AQ", bound="Queue")
_R = TypeVar("_R")


async def _to_thread(fn: Callable[P, _R], /, *args: P.args, **kwargs: P.kwargs) -> _R:
    """`asyncio.to_thread`, with asyncio imported by the first async call: a producer using
    only the sync API never loads it (it is a sixth of the SDK's import time)."""
    import asyncio

    return await asyncio.to_thread(fn, *args, **kwargs)


async def _async_steps(results: MapResults) -> AsyncIterator[Any]:
    """A blocking map's results, each `next()` in a worker thread; closed however it ends."""
    done = object()
    try:
        while True:
            value = await _to_thread(next, results, done)
            if value is done:
                return
            yield value
    finally:
        await _to_thread(results.close)


class Queue:
    """The async surface: every blocking call runs in a worker thread."""

    sync: SyncQueue

    def __init__(self, name: str, **kw: Any) -> None:
        self.sync = SyncQueue(name, **kw)

    @classmethod
    def named(cls: type[_AQ], name: str, **kw: Any) -> _AQ:
        """Lazy like the constructor; first use also ensures the row (see `SyncQueue.named`)."""
        q = cls(name, **kw)
        q.sync.expect_row(declare=True, validate=True)
        return q

    def bind(self: _AQ, dispatch: Plane) -> _AQ:
        """This queue on another plane (see `SyncQueue.bind`)."""
        return self._wrap(self.sync.bind(dispatch))

    def for_run(self: _AQ, run_id: str | None = None) -> _AQ:
        """This queue's per-run queue (see `SyncQueue.for_run`)."""
        return self._wrap(self.sync.for_run(run_id))

    def _wrap(self: _AQ, sync: SyncQueue) -> _AQ:
        if sync is self.sync:
            return self
        other = copy.copy(self)
        other.sync = sync
        return other

    @property
    def name(self) -> str:
        return self.sync.name

    def __repr__(self) -> str:
        text = repr(self.sync)
        return type(self).__name__ + text[text.index("(") :]

    async def submit(
        self,
        payload: Any = None,
        *,
        envelope: Envelope | None = None,
        key: str | None = None,
        priority: float | None = None,
        max_attempts: int = 3,
        timeout_s: float | None = None,
        block_s: float = 30.0,
        resources: Mapping[str, Any] | None = None,
        max_preemptions: int | None = None,
        delay_s: float | None = None,
        at: Any = None,
        after: Sequence[str] | None = None,
        after_failure: str = "cancel",
        runtime: Runtime | None = None,
        nodes: int = 1,
        hang_timeout_s: float | None = None,
    ) -> str:
        return await _to_thread(
            self.sync.submit,
            payload,
            envelope=envelope,
            key=key,
            priority=priority,
            max_attempts=max_attempts,
            timeout_s=timeout_s,
            block_s=block_s,
            resources=resources,
            max_preemptions=max_preemptions,
            delay_s=delay_s,
            at=at,
            after=after,
            after_failure=after_failure,
            runtime=runtime,
            nodes=nodes,
            hang_timeout_s=hang_timeout_s,
        )

    async def submit_many(
        self,
        payloads: Sequence[Any],
        *,
        priority: float | None = None,
        max_attempts: int = 3,
        resources: Mapping[str, Any] | None = None,
        after: Sequence[str] | None = None,
        after_failure: str = "cancel",
        ids: Sequence[str] | None = None,
        after_each: Sequence[Sequence[str] | None] | None = None,
        runtime: Runtime | None = None,
        nodes: int = 1,
        hang_timeout_s: float | None = None,
    ) -> list[str]:
        return await _to_thread(
            self.sync.submit_many,
            payloads,
            priority=priority,
            max_attempts=max_attempts,
            resources=resources,
            after=after,
            after_failure=after_failure,
            ids=ids,
            after_each=after_each,
            runtime=runtime,
            nodes=nodes,
            hang_timeout_s=hang_timeout_s,
        )

    async def result(
        self,
        inv_id: str,
        *,
        timeout: float = 30.0,
        allow_pickle: bool | None = None,
        ref: bool = False,
    ) -> Any:
        return await _to_thread(
            self.sync.result, inv_id, timeout=timeout, allow_pickle=allow_pickle, ref=ref
        )

    async def call(self, payload: Any = None, *, timeout: float = 30.0, **kw: Any) -> Any:
        return await _to_thread(self.sync.call, payload, timeout=timeout, **kw)

    async def stream(
        self,
        inv_id: str,
        *,
        since: int = -1,
        timeout: float = 30.0,
        allow_pickle: bool | None = None,
        rank: int = 0,
    ) -> AsyncIterator[Any]:
        frames = self.sync.stream(
            inv_id, since=since, timeout=timeout, allow_pickle=allow_pickle, rank=rank
        )
        done = object()
        while True:
            value = await _to_thread(next, frames, done)
            if value is done:
                return
            yield value

    async def map(
        self, fn: Callable[..., Any], inputs: Iterable[Any], **kw: Any
    ) -> AsyncIterator[Any]:
        """`SyncQueue.map`, each step in a worker thread; leaving early cancels the rest."""
        async for value in _async_steps(self.sync.map(fn, inputs, **kw)):
            yield value

    async def starmap(
        self, fn: Callable[..., Any], inputs: Iterable[Any], **kw: Any
    ) -> AsyncIterator[Any]:
        async for value in _async_steps(self.sync.starmap(fn, inputs, **kw)):
            yield value

    async def cancel(self, inv_id: str, *, kill: bool = False) -> bool:
        return await _to_thread(self.sync.cancel, inv_id, kill=kill)

    async def count(self, state: str = "queued") -> int:
        return await _to_thread(self.sync.count, state)

    async def claim(self, *, wait: float = 0.0, lease_s: float = DEFAULT_LEASE_S) -> Job | None:
        return await _to_thread(self.sync.claim, wait=wait, lease_s=lease_s)

    async def ack(self, job: Job, result: Any = None) -> None:
        await _to_thread(self.sync.ack, job, result)

    async def nack(self, job: Job, *, error: str, retry: bool = True) -> None:
        await _to_thread(self.sync.nack, job, error=error, retry=retry)

    def topic(self, name: str | None = None) -> Topic:
        return self.sync.topic(name)


# -- typed queues -------------------------------------------------------------------------------
#
# Each fixes its kind and takes only that kind's arguments; the row is ensured with that kind at
# first use, so a daemon that claims in the row's order agrees with the handle. The blocking
# classes are `Sync<Kind>Queue`, as `SyncQueue` sits beside `Queue`: the short names stay with
# the async classes, and each pair sorts together in an import list.


class SyncPriorityQueue(SyncQueue):
    """Priority order (highest first, then oldest); the priority can come from the payload.

    When `submit` is given no `priority` and the payload is a dict holding `priority_field`,
    that value is the priority (a udf call: the argument of that name, or a first-argument dict).
    """

    def __init__(
        self,
        name: str,
        *,
        dispatch: Plane | None = None,
        priority_field: str = "priority",
        elasticity: Mapping[str, Any] | None = None,
        resources: Mapping[str, Any] | None = None,
        runtime: Runtime | None = None,
        **unknown: NoReturn,
    ) -> None:
        refuse_arguments(type(self), name, "priority", unknown)
        self._configure(
            name,
            dispatch=dispatch,
            kind="priority",
            priority_field=priority_field,
            elasticity=elasticity,
            resources=resources,
            runtime=runtime,
            declare=True,
        )


class SyncBoltzmannQueue(SyncPriorityQueue):
    """A priority queue sampled stochastically: P(job) ∝ exp(priority / T).

    `anneal` lowers T as this handle claims or as time passes; see `dreamlake.lakeshore.anneal`:
    {"every_claims": 100, "factor": 0.9, "min": 0.05} or {"half_life_s": 600, "min": 0.05}.
    """

    def __init__(
        self,
        name: str,
        *,
        temperature: float = 1.0,
        anneal: Mapping[str, Any] | None = None,
        dispatch: Plane | None = None,
        priority_field: str = "priority",
        elasticity: Mapping[str, Any] | None = None,
        resources: Mapping[str, Any] | None = None,
        runtime: Runtime | None = None,
        **unknown: NoReturn,
    ) -> None:
        refuse_arguments(type(self), name, "boltzmann", unknown)
        self._configure(
            name,
            dispatch=dispatch,
            kind="boltzmann",
            temperature=temperature,
            anneal=anneal,
            priority_field=priority_field,
            elasticity=elasticity,
            resources=resources,
            runtime=runtime,
            declare=True,
        )


class SyncFILOQueue(SyncQueue):
    """Newest first (within a priority): only the latest request matters."""

    def __init__(
        self,
        name: str,
        *,
        dispatch: Plane | None = None,
        elasticity: Mapping[str, Any] | None = None,
        resources: Mapping[str, Any] | None = None,
        runtime: Runtime | None = None,
        **unknown: NoReturn,
    ) -> None:
        refuse_arguments(type(self), name, "filo", unknown)
        self._configure(
            name,
            dispatch=dispatch,
            kind="filo",
            elasticity=elasticity,
            resources=resources,
            runtime=runtime,
            declare=True,
        )


def _twin_init(
    sync_cls: Callable[P, SyncQueue], kind: str
) -> Callable[Concatenate[Queue, P], None]:
    """An async typed queue's `__init__`: its sync twin's parameters, written once (there).

    Unknown arguments are refused first, under the async class's own name, as its sync twin
    would refuse them.
    """
    signature = inspect.signature(sync_cls)
    takes = {n for n, p in signature.parameters.items() if p.kind is not p.VAR_KEYWORD}

    def __init__(self: Queue, /, *args: P.args, **kwargs: P.kwargs) -> None:
        unknown = {k: v for k, v in kwargs.items() if k not in takes}
        refuse_arguments(type(self), str(args[0] if args else kwargs.get("name")), kind, unknown)
        self.sync = sync_cls(*args, **kwargs)

    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    vars(__init__)["__signature__"] = signature.replace(
        parameters=[self_param, *signature.parameters.values()], return_annotation=None
    )
    return __init__


class PriorityQueue(Queue):
    """The async `SyncPriorityQueue`."""

    sync: SyncPriorityQueue
    __init__ = _twin_init(SyncPriorityQueue, "priority")


class BoltzmannQueue(PriorityQueue):
    """The async `SyncBoltzmannQueue`."""

    sync: SyncBoltzmannQueue
    __init__ = _twin_init(SyncBoltzmannQueue, "boltzmann")


class FILOQueue(Queue):
    """The async `SyncFILOQueue`."""

    sync: SyncFILOQueue
    __init__ = _twin_init(SyncFILOQueue, "filo")


class Pool(Queue):
    """Deprecated: a fixed-size pool is `Queue(name, elasticity={"kind": "fixed", "max": size})`.

    Kept as that, with a DeprecationWarning; the elasticity is written to the queue row at first
    use, like any `elasticity=`.
    """

    def __init__(self, name: str, size: int, **kw: Any) -> None:
        warnings.warn(
            "Pool is deprecated: use Queue(name, elasticity={'kind': 'fixed', 'max': size})",
            DeprecationWarning,
            stacklevel=2,
        )
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise InvalidArgument(f"Pool size must be an integer >= 1, got {size!r}")
        if "elasticity" in kw:
            raise InvalidArgument(
                "Pool sets its elasticity from size; for another policy use "
                "Queue(name, elasticity=...)"
            )
        self.size = size
        super().__init__(name, elasticity={"kind": "fixed", "max": size}, **kw)
