"""`@udf`: a function bound to a queue, still callable locally, submitted by value.

`f.submit(...)` takes the function's own arguments; the options of the submit are underscored
(`_key`, `_priority`, `_dispatch`, `_timeout_s`, `_max_attempts`, `_max_preemptions`,
`_resources`, `_nodes`, `_hang_timeout_s`) so they never collide with them.

`queue=` is a queue object or a queue name. With a name, the decorator builds the queue and picks
its class from the other arguments: `priority_field=` -> PriorityQueue, `temperature=` or
`anneal=` -> BoltzmannQueue, `kind=` names one outright; anything else is an error.
`scope="run"` submits to the queue's per-run queue while a run is current (`dls.context`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, NoReturn, ParamSpec, TypeVar, cast, overload

from .envelope import Envelope
from .errors import InvalidArgument
from .plane.base import Plane
from .queue import (
    Queue,
    SyncBoltzmannQueue,
    SyncFILOQueue,
    SyncPriorityQueue,
    SyncQueue,
)
from .queue_jobs import Shipped, checked_runtime
from .resources import check_optional
from .types import MAX_HANG_TIMEOUT_S, MAX_NODES, MAX_PREEMPTIONS_LIMIT, normalize_kind

if TYPE_CHECKING:
    from .mapping import MapResults
    from .runtime.spec import Runtime

P = ParamSpec("P")
R = TypeVar("R")

#: What `@udf` passes on to the queue it builds from a name.
QUEUE_OPTIONS = ("priority_field", "temperature", "anneal", "elasticity", "kind")
SCOPES = ("run",)


def _number(name: str, value: object, low: float, high: float, allowed: str) -> object:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (low <= value <= high and math.isfinite(value))
    ):
        raise InvalidArgument(f"{name}= must be {allowed}, got {value!r:.80}")
    return value


def _whole(name: str, value: object, low: int, high: int) -> object:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgument(f"{name}= must be an integer {low}..{high}, got {value!r:.80}")
    return value


#: The per-call options a udf may carry as its defaults (`@udf(max_attempts=1)`), each
#: overridden by a call's `_name=` (`f.submit(x, _max_attempts=5)`) or a map's `name=`: one line
#: each, its check. The store checks them again at submit; these say it at decoration time.
CALL_OPTIONS: dict[str, Callable[[str, object], object]] = {
    "priority": lambda n, v: _number(n, v, -math.inf, math.inf, "a finite number"),
    "max_attempts": lambda n, v: _whole(n, v, 1, 1000),
    "timeout_s": lambda n, v: _number(n, v, 1e-9, math.inf, "a positive number of seconds"),
    "max_preemptions": lambda n, v: _whole(n, v, 0, MAX_PREEMPTIONS_LIMIT),
    "nodes": lambda n, v: _whole(n, v, 1, MAX_NODES),
    "hang_timeout_s": lambda n, v: _number(
        n, v, 1e-9, MAX_HANG_TIMEOUT_S, "a positive number of seconds, at most 7 days"
    ),
}


def check_call_options(options: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """The call options given (None: left to the queue), each checked, named as the caller
    spelt it (`prefix` "_" for a call's overrides)."""
    return {
        k: v if v is None else CALL_OPTIONS[k](prefix + k, v)
        for k, v in options.items()
        if k in CALL_OPTIONS
    }


_BY_KIND: dict[str, type[SyncQueue]] = {
    "fifo": SyncQueue,
    "priority": SyncPriorityQueue,
    "filo": SyncFILOQueue,
    "boltzmann": SyncBoltzmannQueue,
}


def queue_from_name(name: str, options: Mapping[str, Any]) -> SyncQueue:
    """The queue `@udf(queue=name, **options)` means; the class follows from the options."""
    kind = options.get("kind")
    if kind is not None:
        cls = _BY_KIND["priority" if kind == "priority" else normalize_kind(kind)]
    elif "temperature" in options or "anneal" in options:
        cls = SyncBoltzmannQueue
    elif "priority_field" in options:
        cls = SyncPriorityQueue
    else:
        cls = SyncQueue
    rest = {k: v for k, v in options.items() if k != "kind" or cls is SyncQueue}
    # typo safety: LAKESHORE_STRICT_QUEUES=1 refuses a queue that does not exist
    return cls(name, **rest).expect_row(missing="strict-env")


@dataclass(frozen=True)
class SubmitOptions:
    """A udf submit's own options, taken out of the call's keyword arguments (`_key=`, ...)."""

    key: str | None = None
    priority: float | None = None
    dispatch: Plane | None = None
    timeout_s: float | None = None
    max_attempts: int = 3
    max_preemptions: int | None = None
    #: Issue 47: how many daemons run the call at once, and the silence that makes it a hang.
    nodes: int = 1
    hang_timeout_s: float | None = None
    #: remote() only: how long to wait for the result.
    timeout: float = 30.0
    #: This call's request (`_resources=`), instead of the udf's.
    resources: Mapping[str, Any] | None = None
    #: What this call brings (`_runtime=`, a dls.Runtime), instead of the udf's.
    runtime: Runtime | None = None
    #: submit() only: held as `scheduled` this long, or until then (sdk/workflow.py).
    delay_s: float | None = None
    at: Any = None
    #: submit() only: the parents it waits for, and what a parent's failure does to it.
    after: tuple[str, ...] = ()
    after_failure: str = "cancel"

    @classmethod
    def take(cls, kwargs: dict[str, Any], defaults: Mapping[str, Any] = {}) -> SubmitOptions:
        """Pop the underscored options from `kwargs` (what is left is the function's); a call
        option not given is the udf's default (`defaults`), else the submit's own."""
        given = check_call_options(
            {k[1:]: kwargs.pop(k) for k in [f"_{n}" for n in CALL_OPTIONS] if k in kwargs}, "_"
        )
        calls = {**defaults, **given}
        return cls(
            key=_option(kwargs, "_key", str, None),
            dispatch=_option(kwargs, "_dispatch", Plane, None),
            priority=calls.get("priority"),
            timeout_s=calls.get("timeout_s"),
            max_attempts=calls.get("max_attempts", 3),
            max_preemptions=calls.get("max_preemptions"),
            nodes=calls.get("nodes", 1),
            hang_timeout_s=calls.get("hang_timeout_s"),
            timeout=float(_option(kwargs, "_timeout", (int, float), 30.0)),
            resources=_option(kwargs, "_resources", Mapping, None),
            runtime=_runtime_option(kwargs),
            delay_s=_option(kwargs, "_delay_s", (int, float), None),
            at=kwargs.pop("_at", None),
            after=tuple(_option(kwargs, "_after", (list, tuple), ())),
            after_failure=_option(kwargs, "_after_failure", str, "cancel"),
        )


T = TypeVar("T")


def _option(kwargs: dict[str, Any], name: str, kind: Any, default: T) -> T:
    value = kwargs.pop(name, default)
    if value is not default and value is not None and not isinstance(value, kind):
        raise InvalidArgument(f"{name}= got a {type(value).__name__}: {value!r}")
    return cast(T, value)


def _runtime_option(kwargs: dict[str, Any]) -> Runtime | None:
    found = checked_runtime(kwargs.pop("_runtime", None), "_runtime=")
    assert not isinstance(found, Shipped)  # only a map makes one, never a call
    return found


def check_scope(scope: object) -> str | None:
    if scope is not None and scope not in SCOPES:
        raise InvalidArgument(f"unknown udf scope {scope!r}; use scope='run' or leave it out")
    return scope


class UDF(Generic[P, R]):
    def __init__(
        self,
        fn: Callable[P, R],
        queue: SyncQueue | Queue | str,
        *,
        scope: str | None = None,
        resources: Mapping[str, Any] | None = None,
        defaults: Mapping[str, Any] | None = None,
        runtime: Runtime | None = None,
    ) -> None:
        functools.update_wrapper(self, fn)
        #: The call options each call takes unless it says otherwise (`CALL_OPTIONS`).
        self.defaults = check_call_options(defaults or {})
        #: What each call needs to run (sdk/resources.py), unless a call says `_resources=`;
        #: None: the queue's default.
        self.resources = check_optional(resources)
        #: What each call brings to its worker (sdk/runtime/), unless a call says `_runtime=`;
        #: None: the queue's, else the producer's own modules that the function reaches.
        self.runtime = checked_runtime(runtime)
        self.fn = fn
        if isinstance(queue, Queue):
            queue = queue.sync
        self._queue = queue if isinstance(queue, SyncQueue) else queue_from_name(queue, {})
        self.scope = check_scope(scope)
        self.name = f"{fn.__module__}:{fn.__qualname__}"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run locally, in this process, like the plain function."""
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<udf {self.name} on {self.queue_for(None).name!r}>"

    @property
    def queue(self) -> SyncQueue:
        """The queue this udf is bound to (before any run scope)."""
        return self._queue

    def queue_for(self, dispatch: Plane | None) -> SyncQueue:
        """Where a submit goes: the bound queue, on `dispatch` if given, in the current run."""
        q = self._queue if dispatch is None else self._queue.bind(dispatch)
        return q.for_run() if self.scope == "run" else q

    def envelope(self, *args: Any, **kwargs: Any) -> Envelope:
        return Envelope.for_udf(self.fn, args, kwargs, self.name)

    def submit(self, *args: P.args, **kwargs: P.kwargs) -> str:
        """Enqueue a call; returns its durable id."""
        opts = SubmitOptions.take(kwargs, self.defaults)
        return self.queue_for(opts.dispatch).submit(
            envelope=self.envelope(*args, **kwargs),
            key=opts.key,
            priority=opts.priority,
            max_attempts=opts.max_attempts,
            timeout_s=opts.timeout_s,
            resources=self._resources(opts),
            max_preemptions=opts.max_preemptions,
            runtime=self._runtime(opts),
            nodes=opts.nodes,
            hang_timeout_s=opts.hang_timeout_s,
            delay_s=opts.delay_s,
            at=opts.at,
            after=opts.after,
            after_failure=opts.after_failure,
        )

    def _resources(self, opts: SubmitOptions) -> Mapping[str, Any] | None:
        return opts.resources if opts.resources is not None else self.resources

    def _runtime(self, opts: SubmitOptions) -> Any:
        return opts.runtime if opts.runtime is not None else self.runtime

    def map(
        self,
        inputs: Iterable[Any],
        *,
        ordered: bool = True,
        return_exceptions: bool = False,
        chunk_size: int | None = None,
        **submit: Any,
    ) -> MapResults:
        """This function over each input as jobs on its queue, results in input order (or as
        they end): `SyncQueue.map` with this udf's function (sdk/mapping.py)."""
        return self.queue_for(submit.pop("dispatch", None)).map(
            self.fn,
            inputs,
            ordered=ordered,
            return_exceptions=return_exceptions,
            chunk_size=chunk_size,
            **self._map_options(submit),
        )

    def _map_options(self, submit: dict[str, Any]) -> dict[str, Any]:
        """A map's submit keywords over this udf's defaults and request."""
        given = {**self.defaults, **check_call_options(submit), **submit}
        if self.resources is not None:
            given.setdefault("resources", self.resources)
        if self.runtime is not None:
            given.setdefault("runtime", self.runtime)
        return given

    def starmap(self, inputs: Iterable[Any], **kw: Any) -> MapResults:
        """`map` with each input a tuple of arguments."""
        return self.queue_for(kw.pop("dispatch", None)).starmap(
            self.fn, inputs, **self._map_options(kw)
        )

    def remote(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Submit and wait for the result (`_timeout` seconds, default 30): one round trip, as
        `q.call` makes."""
        opts = SubmitOptions.take(kwargs, self.defaults)
        result: R = self.queue_for(opts.dispatch).call(
            envelope=self.envelope(*args, **kwargs),
            key=opts.key,
            priority=opts.priority,
            max_attempts=opts.max_attempts,
            timeout_s=opts.timeout_s,
            timeout=opts.timeout,
            resources=self._resources(opts),
            max_preemptions=opts.max_preemptions,
            runtime=self._runtime(opts),
            nodes=opts.nodes,
            hang_timeout_s=opts.hang_timeout_s,
            after=opts.after,
            after_failure=opts.after_failure,
        )
        return result


@overload
def udf(
    fn: Callable[P, R],
    *,
    queue: SyncQueue | Queue | str = ...,
    scope: str | None = ...,
    priority_field: str = ...,
    temperature: float = ...,
    anneal: Mapping[str, Any] = ...,
    elasticity: Mapping[str, Any] = ...,
    kind: str = ...,
    resources: Mapping[str, Any] | None = ...,
    runtime: Runtime | None = ...,
    priority: float | None = ...,
    max_attempts: int = ...,
    timeout_s: float | None = ...,
    max_preemptions: int | None = ...,
    nodes: int = ...,
    hang_timeout_s: float | None = ...,
    **unknown: NoReturn,
) -> UDF[P, R]: ...
@overload
def udf(
    fn: None = None,
    *,
    queue: SyncQueue | Queue | str = ...,
    scope: str | None = ...,
    priority_field: str = ...,
    temperature: float = ...,
    anneal: Mapping[str, Any] = ...,
    elasticity: Mapping[str, Any] = ...,
    kind: str = ...,
    resources: Mapping[str, Any] | None = ...,
    runtime: Runtime | None = ...,
    priority: float | None = ...,
    max_attempts: int = ...,
    timeout_s: float | None = ...,
    max_preemptions: int | None = ...,
    nodes: int = ...,
    hang_timeout_s: float | None = ...,
    **unknown: NoReturn,
) -> Callable[[Callable[P, R]], UDF[P, R]]: ...
def udf(
    fn: Callable[P, R] | None = None,
    *,
    queue: SyncQueue | Queue | str = "default",
    scope: str | None = None,
    resources: Mapping[str, Any] | None = None,
    runtime: Runtime | None = None,
    **options: Any,
) -> UDF[P, R] | Callable[[Callable[P, R]], UDF[P, R]]:
    """Bind a function to a queue: `@udf(queue=q)` or `@udf(queue="tutorial", ...)`.

    With a name, `priority_field=`, `temperature=`, `anneal=`, `elasticity=` and `kind=` build
    the queue (PriorityQueue for priority_field, BoltzmannQueue for temperature or anneal).
    `resources=` is what each call needs to run (GPUs, CPUs, memory: sdk/resources.py);
    `runtime=` what it brings to its worker (a dls.Runtime: a folder, requirements; by default
    the producer's own modules that the function reaches). `nodes=` runs each call on that
    many daemons at once (issue 47) and `hang_timeout_s=` says when one is hung; they are call
    options like `max_attempts=`, so a call's `_nodes=` and `_hang_timeout_s=` win.
    """
    check_optional(resources)
    checked_runtime(runtime)
    defaults = check_call_options(options)
    options = {k: v for k, v in options.items() if k not in CALL_OPTIONS}
    unknown = sorted(set(options) - set(QUEUE_OPTIONS))
    if unknown:
        import difflib  # only to word this refusal: not loaded with the SDK

        takes = ["queue", "scope", "resources", "runtime", *CALL_OPTIONS]
        close = difflib.get_close_matches(unknown[0], [*QUEUE_OPTIONS, *takes], n=1)
        raise InvalidArgument(
            f"@udf got an unknown argument {unknown[0]}="
            + (f"; did you mean {close[0]}=?" if close else "")
            + f" (it takes {'=, '.join(takes)}= and, with a queue name, "
            + f"{'=, '.join(QUEUE_OPTIONS)}=)"
        )
    check_scope(scope)
    if options and not isinstance(queue, str):
        raise InvalidArgument(
            f"@udf got {', '.join(f'{k}=' for k in sorted(options))} with a queue object: "
            "those belong to the queue, e.g. PriorityQueue('urgent', priority_field='p')"
        )
    bound = queue_from_name(queue, options) if isinstance(queue, str) else queue

    def wrap(f: Callable[P, R]) -> UDF[P, R]:
        return UDF(f, bound, scope=scope, resources=resources, defaults=defaults, runtime=runtime)

    return wrap(fn) if fn is not None else wrap
