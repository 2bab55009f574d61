"""Job bodies that are code rather than data.

A job's payload is usually plain data for a worker that already knows what to run. When the
producer wants to ship the work itself, it wraps it: a `Thunk` is a deferred call built in the
producer's own code (`dls.thunk(train, cfg)`), and an `Envelope` is what rides the wire for any of
the four body kinds a worker runs. Keeping the kind explicit lets the daemon pick how to run a
job (call it, shell out, hand the raw value to a `--handler`) before it unpickles anything, and
lets the codec write `exec` and `raw` envelopes as plain msgpack that a non-Python producer can
build by hand.

The constructors (`Envelope.for_udf`, `for_thunk`, ...) are what `submit` calls, so they also
take the producer's OpenTelemetry trace context when a span is current (sdk/tracing.py): the
envelope is the one thing that travels with the job from producer to worker.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, ParamSpec, TypeVar, get_args

from .context import check_run_id
from .errors import InvalidArgument
from .tracing import check_carrier, current_carrier

__all__ = ["Envelope", "EnvelopeKind", "Thunk", "thunk"]

R = TypeVar("R")
P = ParamSpec("P")

EnvelopeKind = Literal["thunk", "udf", "exec", "raw"]
_KINDS: frozenset[str] = frozenset(get_args(EnvelopeKind))


@dataclass(frozen=True)
class Thunk(Generic[R]):
    """A call captured now and run later, on whichever worker claims the job.

    Frozen so that what was submitted is what runs: a producer cannot mutate a thunk after
    handing it to `submit` and race the encoder.
    """

    fn: Callable[..., R]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_call(self.fn, self.args, self.kwargs, what="thunk")

    def __call__(self) -> R:
        return self.fn(*self.args, **self.kwargs)


def thunk(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> Thunk[R]:
    """Capture `fn(*args, **kwargs)` as a job body without running it.

    The ParamSpec makes a type checker check the arguments against `fn` at the call site, which
    is the only place a mismatch is cheap to find: on the worker it is a failed job.
    """
    return Thunk(fn, tuple(args), dict(kwargs))


@dataclass(frozen=True)
class Envelope:
    """The job body as the worker sees it: which kind of body, and what that kind needs.

    One flat record rather than four classes so that the wire form is a single map keyed by
    `kind`, and a worker can refuse a kind it does not run without decoding the rest.
    """

    kind: EnvelopeKind
    fn: Callable[..., Any] | None = None
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: The udf's `module:qualname`, so logs and the dashboard can name a job without unpickling.
    name: str | None = None
    #: exec: a shell command line, run by the worker's shell.
    command: str | None = None
    cwd: str | None = None
    env: dict[str, str] | None = None
    #: raw: the payload handed as-is to the worker's `--handler`.
    value: Any = None
    #: Per-job limit on run time; None leaves the queue's own limit in force.
    timeout_s: float | None = None
    #: The run (`dls.context.run`) the producer was in; the worker restores it around the body,
    #: so what the body submits inherits it.
    run: str | None = None
    #: The producer's trace context (W3C `traceparent` / `tracestate`), taken when the envelope
    #: is built if an OpenTelemetry span is current; the worker's span for the job is its child
    #: (sdk/tracing.py, docs/tracing.md).
    trace: dict[str, str] | None = None

    def __post_init__(self) -> None:
        # Checked here, not only in the constructors, because decode builds envelopes from bytes
        # another process wrote; a malformed one must fail as InvalidArgument, not on the worker.
        if self.kind not in _KINDS:
            raise InvalidArgument(
                f"envelope kind must be one of {sorted(_KINDS)}, got {self.kind!r}"
            )
        if self.kind in ("thunk", "udf"):
            _check_call(self.fn, self.args, self.kwargs, what=f"{self.kind} envelope")
        elif self.kind == "exec" and (
            not isinstance(self.command, str) or not self.command.strip()
        ):
            raise InvalidArgument(
                f"exec envelope needs a non-empty command string, got {self.command!r}"
            )
        if self.name is not None and not isinstance(self.name, str):
            raise InvalidArgument(f"envelope name must be a str, got {type(self.name).__name__}")
        if self.cwd is not None and not isinstance(self.cwd, str):
            raise InvalidArgument(f"envelope cwd must be a str, got {type(self.cwd).__name__}")
        if self.env is not None:
            _check_env(self.env)
        if self.timeout_s is not None:
            _check_timeout(self.timeout_s)
        if self.run is not None:
            check_run_id(self.run)
        if self.trace is not None:
            check_carrier(self.trace)

    @classmethod
    def for_thunk(cls, t: Thunk[Any], *, timeout_s: float | None = None) -> Envelope:
        """Wrap a thunk built with `dls.thunk` for the wire."""
        if not isinstance(t, Thunk):
            raise InvalidArgument(
                f"Envelope.for_thunk needs a Thunk (from dls.thunk), got {type(t).__name__}"
            )
        return cls(
            kind="thunk",
            fn=t.fn,
            args=t.args,
            kwargs=dict(t.kwargs),
            timeout_s=timeout_s,
            trace=current_carrier(),
        )

    @classmethod
    def for_udf(
        cls,
        fn: Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        name: str | None = None,
        *,
        timeout_s: float | None = None,
    ) -> Envelope:
        """Wrap a call to a `@dls.udf` function; `name` defaults to its `module:qualname`."""
        if name is None and callable(fn):
            name = qualified_name(fn)
        return cls(
            kind="udf",
            fn=fn,
            args=tuple(args),
            kwargs=dict(kwargs or {}),
            name=name,
            timeout_s=timeout_s,
            trace=current_carrier(),
        )

    @classmethod
    def for_exec(
        cls,
        command: str,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        *,
        timeout_s: float | None = None,
    ) -> Envelope:
        """Wrap a shell command line; `env` is added to the worker's environment."""
        return cls(
            kind="exec",
            command=command,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            timeout_s=timeout_s,
            trace=current_carrier(),
        )

    @classmethod
    def for_raw(cls, value: Any, *, timeout_s: float | None = None) -> Envelope:
        """Wrap a data payload for a worker started with `--handler`."""
        return cls(kind="raw", value=value, timeout_s=timeout_s, trace=current_carrier())


def qualified_name(fn: Callable[..., Any]) -> str:
    """`module:qualname` of a callable, the form logs use to name a udf."""
    module = getattr(fn, "__module__", None) or "?"
    qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    return f"{module}:{qualname or type(fn).__qualname__}"


def _check_call(fn: object, args: object, kwargs: object, *, what: str) -> None:
    if not callable(fn):
        raise InvalidArgument(f"{what} needs a callable fn, got {type(fn).__name__}")
    if not isinstance(args, tuple):
        raise InvalidArgument(f"{what} args must be a tuple, got {type(args).__name__}")
    if not isinstance(kwargs, dict):
        raise InvalidArgument(f"{what} kwargs must be a dict, got {type(kwargs).__name__}")
    bad = [k for k in kwargs if not isinstance(k, str)]
    if bad:
        raise InvalidArgument(f"{what} kwargs keys must be str, got {bad[0]!r}")


def _check_env(env: object) -> None:
    if not isinstance(env, dict):
        raise InvalidArgument(f"envelope env must be a dict, got {type(env).__name__}")
    for k, v in env.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise InvalidArgument(f"envelope env must map str to str, got {k!r}: {v!r}")


def _check_timeout(timeout_s: object) -> None:
    if (
        isinstance(timeout_s, bool)
        or not isinstance(timeout_s, (int, float))
        or not math.isfinite(timeout_s)
        or timeout_s <= 0
    ):
        raise InvalidArgument(
            f"envelope timeout_s must be a positive number of seconds, got {timeout_s!r}"
        )
