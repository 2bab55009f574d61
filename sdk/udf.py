"""`@udf`: a function bound to a queue, still callable locally, submitted by value.

`f.submit(...)` takes the function's own arguments; the options of the submit are underscored
(`_key`, `_priority`, `_dispatch`, `_timeout_s`, `_max_attempts`) so they never collide with them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Generic, ParamSpec, TypeVar, overload

from .envelope import Envelope
from .plane.base import Plane
from .queue import Queue, SyncQueue

P = ParamSpec("P")
R = TypeVar("R")

_OPTIONS = ("_key", "_priority", "_dispatch", "_timeout_s", "_max_attempts")


class UDF(Generic[P, R]):
    def __init__(self, fn: Callable[P, R], queue: SyncQueue | Queue | str) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        self._queue = queue.sync if isinstance(queue, Queue) else queue
        self.name = f"{fn.__module__}:{fn.__qualname__}"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run locally, in this process, like the plain function."""
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<udf {self.name} on {self.queue_for(None).name!r}>"

    def queue_for(self, dispatch: Plane | None) -> SyncQueue:
        q = self._queue
        if isinstance(q, str):
            return SyncQueue(q, dispatch=dispatch)
        if dispatch is not None and dispatch is not q.dispatch:
            return SyncQueue(q.name, dispatch=dispatch, kind=q.kind, temperature=q.temperature)
        return q

    def envelope(self, *args: Any, **kwargs: Any) -> Envelope:
        return Envelope.for_udf(self.fn, args, kwargs, self.name)

    def submit(self, *args: P.args, **kwargs: P.kwargs) -> str:
        """Enqueue a call; returns its durable id."""
        opts = {k: kwargs.pop(k) for k in _OPTIONS if k in kwargs}
        queue = self.queue_for(opts.get("_dispatch"))  # type: ignore[arg-type]
        return queue.submit(
            envelope=self.envelope(*args, **kwargs),
            key=opts.get("_key"),  # type: ignore[arg-type]
            priority=opts.get("_priority", 0.0),  # type: ignore[arg-type]
            max_attempts=opts.get("_max_attempts", 3),  # type: ignore[arg-type]
            timeout_s=opts.get("_timeout_s"),  # type: ignore[arg-type]
        )

    def remote(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Submit and wait for the result (`_timeout` seconds, default 30)."""
        timeout = float(kwargs.pop("_timeout", 30.0))  # type: ignore[arg-type]
        dispatch = kwargs.get("_dispatch")
        inv = self.submit(*args, **kwargs)
        result: R = self.queue_for(dispatch).result(inv, timeout=timeout)  # type: ignore[arg-type]
        return result


@overload
def udf(fn: Callable[P, R], *, queue: SyncQueue | Queue | str = ...) -> UDF[P, R]: ...
@overload
def udf(
    fn: None = None, *, queue: SyncQueue | Queue | str = ...
) -> Callable[[Callable[P, R]], UDF[P, R]]: ...
def udf(
    fn: Callable[P, R] | None = None, *, queue: SyncQueue | Queue | str = "default"
) -> UDF[P, R] | Callable[[Callable[P, R]], UDF[P, R]]:
    """Bind a function to a queue: `@udf(queue=q)` or `@udf(queue="tutorial")`."""

    def wrap(f: Callable[P, R]) -> UDF[P, R]:
        return UDF(f, queue)

    return wrap(fn) if fn is not None else wrap
