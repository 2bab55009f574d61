"""OpenTelemetry across the queue: the producer's trace continues in the worker that runs the job.

A job leaves the producer's process (and often its machine), so the trace it belongs to would
end at `submit` unless its context rides along. When a span is current at submit, the envelope
carries the trace context as the process's propagator writes it (W3C `traceparent` and
`tracestate` by default), and the worker runs the body inside a CONSUMER span that is a child of
it, beside a `queue wait` span from the submit to the start, so the wait is visible in the
trace. The span is opened where the body runs (`execute.run_body`): the in-process `run_worker`
and the daemon's child processes get the same span.

OpenTelemetry is an optional extra (`pip install 'dreamlake-lakeshore[otel]'`) and is never
imported here: a process that has not loaded `opentelemetry.trace` itself can have no current
span to propagate and no tracer provider to record with, so tracing costs such a process one
dict lookup per job and nothing at import.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from .errors import InvalidArgument
from .ids import ulid_time

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Tracer

__all__ = [
    "TRACER_NAME",
    "active",
    "check_carrier",
    "current_carrier",
    "job_span",
]

#: The instrumentation scope the worker's spans are recorded under.
TRACER_NAME = "dreamlake.lakeshore"
#: A carrier larger than this is refused: W3C caps a `tracestate` at 512 characters, so a bigger
#: one is not a trace context but something else riding in its place.
MAX_CARRIER_CHARS = 8192


#: The worker's tracer, got once: OpenTelemetry builds a new one per call, a sixth of a span's
#: cost. Taken before a provider is set, it is the API's proxy, which follows the provider set
#: later.
_tracer: Tracer | None = None


def active() -> bool:
    """Whether this process has loaded OpenTelemetry (so a span could be current or recorded)."""
    return "opentelemetry.trace" in sys.modules


def _worker_tracer() -> Tracer:
    global _tracer
    if _tracer is None:
        from opentelemetry import trace

        _tracer = trace.get_tracer(TRACER_NAME)
    return _tracer


def current_carrier() -> dict[str, str] | None:
    """The current span's trace context as propagation headers, or None when there is none.

    Read through the global propagator, so a process configured for other formats (B3,
    baggage) sends those too; the worker reads them back with the same propagator.
    """
    if not active():
        return None
    from opentelemetry import propagate, trace

    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier or None


def check_carrier(carrier: object) -> None:
    """InvalidArgument unless `carrier` is a small map of header names to values.

    An envelope is decoded from bytes another process wrote; a malformed context must fail as
    bad input where it is read, not inside a tracer on the worker.
    """
    if not isinstance(carrier, Mapping):
        raise InvalidArgument(
            f"envelope trace must be a map of propagation headers (traceparent, tracestate) "
            f"to str values, got {type(carrier).__name__}"
        )
    size = 0
    for key, value in carrier.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidArgument(f"envelope trace must map str to str, got {key!r}: {value!r}")
        size += len(key) + len(value)
    if size > MAX_CARRIER_CHARS:
        raise InvalidArgument(
            f"envelope trace holds {size} characters; a trace context is at most "
            f"{MAX_CARRIER_CHARS}"
        )


@contextlib.contextmanager
def job_span(
    carrier: Mapping[str, str] | None,
    *,
    inv_id: str,
    attempt: int,
    queue: str | None,
    name: str | None = None,
) -> Iterator[None]:
    """Run the block as the job's span, a child of the producer's context when it came along.

    Attributes: the queue, invocation id, attempt, `lakeshore.queue_wait_s` (submit to the
    start of this attempt, earlier attempts included) and `lakeshore.outcome`. A body that
    raises marks the span as an error with the exception recorded, and re-raises unchanged.
    """
    if not active():
        yield
        return
    from opentelemetry import propagate, trace

    started = time.time()
    parent = propagate.extract(carrier) if carrier else None
    tracer = _worker_tracer()
    attributes = _attributes(inv_id, attempt, queue, name)
    submitted = ulid_time(inv_id)
    if submitted is not None:
        attributes["lakeshore.queue_wait_s"] = max(0.0, started - submitted)
        if parent is not None and trace.get_current_span(parent).get_span_context().is_valid:
            _queue_wait_span(tracer, parent, attributes, submitted, started)
    with tracer.start_as_current_span(
        f"process {queue}" if queue else "process",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes=attributes,
        start_time=int(started * 1e9),
    ) as span:
        try:
            yield
        except BaseException:
            span.set_attribute("lakeshore.outcome", "failed")
            raise
        span.set_attribute("lakeshore.outcome", "succeeded")


def _attributes(inv_id: str, attempt: int, queue: str | None, name: str | None) -> dict[str, Any]:
    # The messaging semantic conventions' names, so tracing backends group the spans as queue
    # work; the lakeshore.* twins are what the docs and dashboards here name.
    attributes: dict[str, Any] = {
        "messaging.system": "lakeshore",
        "messaging.operation.type": "process",
        "messaging.message.id": inv_id,
        "lakeshore.invocation_id": inv_id,
        "lakeshore.attempt": attempt,
    }
    if queue:
        attributes["messaging.destination.name"] = queue
        attributes["lakeshore.queue"] = queue
    if name:
        attributes["lakeshore.udf"] = name
    return attributes


def _queue_wait_span(
    tracer: Tracer,
    parent: Context,
    attributes: Mapping[str, Any],
    submitted: float,
    started: float,
) -> None:
    """A span from the submit to this attempt's start, beside the job's span in the trace.

    Its start is the id's time, read on the producer's or the plane's clock: across machines
    the two clocks' skew is part of it (clamped so it never ends before it starts).
    """
    start_ns = int(submitted * 1e9)
    end_ns = max(start_ns, int(started * 1e9))
    span = tracer.start_span(
        "queue wait", context=parent, attributes=dict(attributes), start_time=start_ns
    )
    span.end(end_time=end_ns)
