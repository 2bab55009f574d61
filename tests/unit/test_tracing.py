"""OpenTelemetry across the queue, in-process: a producer span, a submit, `run_worker` runs it.

Spans are recorded by the OpenTelemetry SDK's InMemorySpanExporter on the process's global
tracer provider (set once per process: OpenTelemetry refuses to replace it), and each test
reads only the spans of its own trace or invocation.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode

import dreamlake.lakeshore as dls
from dreamlake.lakeshore import codec, worker
from dreamlake.lakeshore.envelope import Envelope
from dreamlake.lakeshore.errors import DecodeError, InvalidArgument

#: The plane the body of `submit_child` submits to (module level: the body is pickled by name).
_PLANE: list[dls.Dispatch] = []


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider(shutdown_on_exit=False)
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


@pytest.fixture
def q(monkeypatch: pytest.MonkeyPatch) -> Iterator[dls.SyncQueue]:
    monkeypatch.setattr(worker, "CLAIM_WAIT_S", 0.05)
    with dls.Dispatch(":memory:") as plane:
        _PLANE[:] = [plane]
        yield dls.SyncQueue("traced", dispatch=plane)
        _PLANE.clear()


def add(x: int, y: int) -> int:
    return x + y


def explode(message: str) -> None:
    raise ValueError(message)


def inner_span() -> str:
    with trace.get_tracer("body").start_as_current_span("inside the body") as span:
        return format(span.get_span_context().span_id, "016x")


def submit_child() -> str:
    return dls.SyncQueue("traced", dispatch=_PLANE[0]).submit(dls.thunk(add, 1, 2))


def spans_of(exporter: InMemorySpanExporter, inv_id: str) -> dict[str, ReadableSpan]:
    """The job's spans by name: its `process` span and its `queue wait` span."""
    return {
        s.name: s
        for s in exporter.get_finished_spans()
        if s.attributes is not None and s.attributes.get("lakeshore.invocation_id") == inv_id
    }


def test_the_worker_span_is_a_child_of_the_producer_span(
    exporter: InMemorySpanExporter, q: dls.SyncQueue
) -> None:
    # Given a producer span current at submit
    with trace.get_tracer("producer").start_as_current_span("produce") as producer:
        inv = q.submit(dls.thunk(add, 2, 3))
    parent = producer.get_span_context()

    # When the in-process worker runs the job
    assert dls.run_worker(q, once=True) == 1

    # Then the job's span continues the producer's trace, as its child
    assert q.result(inv, timeout=5) == 5
    spans = spans_of(exporter, inv)
    job = spans["process traced"]
    assert job.context is not None and job.context.trace_id == parent.trace_id
    assert job.parent is not None and job.parent.span_id == parent.span_id
    assert job.kind is SpanKind.CONSUMER
    assert job.attributes is not None
    assert job.attributes["lakeshore.queue"] == "traced"
    assert job.attributes["lakeshore.attempt"] == 1
    assert job.attributes["lakeshore.outcome"] == "succeeded"
    assert job.attributes["messaging.system"] == "lakeshore"
    assert isinstance(job.attributes["lakeshore.queue_wait_s"], float)
    assert job.attributes["lakeshore.queue_wait_s"] >= 0
    # and the wait is a span of its own beside it, ending where the job's span starts
    wait = spans["queue wait"]
    assert wait.parent is not None and wait.parent.span_id == parent.span_id
    assert wait.end_time == job.start_time


def test_a_failing_udf_marks_its_span_as_an_error(
    exporter: InMemorySpanExporter, q: dls.SyncQueue
) -> None:
    f = dls.udf(explode, queue=q)
    with trace.get_tracer("producer").start_as_current_span("produce") as producer:
        inv = f.submit("no such checkpoint")

    dls.run_worker(q, once=True)

    job = spans_of(exporter, inv)["process traced"]
    assert job.context is not None
    assert job.context.trace_id == producer.get_span_context().trace_id
    assert job.status.status_code is StatusCode.ERROR
    assert job.attributes is not None
    assert job.attributes["lakeshore.outcome"] == "failed"
    assert job.attributes["lakeshore.udf"].endswith(":explode")
    (event,) = [e for e in job.events if e.name == "exception"]
    assert event.attributes is not None
    assert event.attributes["exception.message"] == "no such checkpoint"


def test_without_a_producer_span_the_job_span_starts_a_trace(
    exporter: InMemorySpanExporter, q: dls.SyncQueue
) -> None:
    inv = q.submit(dls.thunk(add, 1, 1))

    dls.run_worker(q, once=True)

    spans = spans_of(exporter, inv)
    assert set(spans) == {"process traced"}  # no queue-wait span hanging off nothing
    assert spans["process traced"].parent is None
    assert spans["process traced"].attributes is not None
    assert spans["process traced"].attributes["lakeshore.queue_wait_s"] >= 0


def test_spans_the_body_opens_are_children_of_the_job_span(
    exporter: InMemorySpanExporter, q: dls.SyncQueue
) -> None:
    inv = q.submit(dls.thunk(inner_span))

    dls.run_worker(q, once=True)

    inner_id = q.result(inv, timeout=5)
    job = spans_of(exporter, inv)["process traced"]
    (inner,) = [
        s
        for s in exporter.get_finished_spans()
        if s.context is not None and format(s.context.span_id, "016x") == inner_id
    ]
    assert inner.parent is not None and job.context is not None
    assert inner.parent.span_id == job.context.span_id


def test_a_job_submitted_by_a_job_stays_in_the_same_trace(
    exporter: InMemorySpanExporter, q: dls.SyncQueue
) -> None:
    with trace.get_tracer("producer").start_as_current_span("produce") as producer:
        outer = q.submit(dls.thunk(submit_child))

    assert dls.run_worker(q, burst=True) == 2

    inner = q.result(outer, timeout=5)
    outer_span = spans_of(exporter, outer)["process traced"]
    inner_span_ = spans_of(exporter, inner)["process traced"]
    assert outer_span.context is not None and inner_span_.parent is not None
    assert inner_span_.parent.span_id == outer_span.context.span_id
    assert inner_span_.context is not None
    assert inner_span_.context.trace_id == producer.get_span_context().trace_id


def test_a_shell_command_gets_the_job_span_as_traceparent(
    exporter: InMemorySpanExporter, q: dls.SyncQueue
) -> None:
    with trace.get_tracer("producer").start_as_current_span("produce"):
        inv = q.submit(envelope=Envelope.for_exec('echo "$TRACEPARENT"', env={"X": "1"}))

    dls.run_worker(q, once=True)

    (line,) = list(q.stream(inv, timeout=5))
    job = spans_of(exporter, inv)["process traced"]
    assert job.context is not None
    version, trace_id, span_id, _flags = line.split("-")
    assert (version, trace_id, span_id) == (
        "00",
        format(job.context.trace_id, "032x"),
        format(job.context.span_id, "016x"),
    )


def test_the_trace_context_rides_the_wire_and_bad_ones_are_refused(
    exporter: InMemorySpanExporter,  # installs the tracer provider, whichever test runs first
) -> None:
    with trace.get_tracer("producer").start_as_current_span("produce") as producer:
        envelope = Envelope.for_raw({"x": 1})
    assert envelope.trace is not None
    assert envelope.trace["traceparent"].split("-")[1] == format(
        producer.get_span_context().trace_id, "032x"
    )

    decoded = codec.decode(codec.encode(envelope))
    assert isinstance(decoded, Envelope) and decoded.trace == envelope.trace
    assert Envelope.for_raw({"x": 1}).trace is None  # no span current: nothing rides

    with pytest.raises(InvalidArgument, match="envelope trace must map str to str"):
        Envelope(kind="raw", trace={"traceparent": 7})  # type: ignore[dict-item]
    with pytest.raises(InvalidArgument, match="trace context is at most"):
        Envelope(kind="raw", trace={"tracestate": "x" * 10_000})
    forged = codec.encode(Envelope(kind="raw", value=1))
    with pytest.raises(DecodeError, match="envelope trace must be a map"):
        codec.decode(_with_wire_field(forged, "trace", "00-abc"))


def _with_wire_field(encoded: bytes, key: str, value: Any) -> bytes:
    """The encoded envelope with one wire field set, as another producer could write it."""
    import msgpack

    outer = msgpack.unpackb(encoded, raw=False, strict_map_key=False)
    wire = msgpack.unpackb(outer.data, raw=False)
    wire[key] = value
    return msgpack.packb(msgpack.ExtType(outer.code, msgpack.packb(wire)))


def test_a_process_that_never_loaded_opentelemetry_never_loads_it() -> None:
    """Submit and run a job with the otel extra installed: nothing imports it for us."""
    script = (
        "import sys, json\n"
        "import dreamlake.lakeshore as dls\n"
        "with dls.Dispatch(':memory:') as d:\n"
        "    q = dls.SyncQueue('q', dispatch=d)\n"
        "    inv = q.submit(dls.thunk(divmod, 7, 2))\n"
        "    dls.run_worker(q, once=True)\n"
        "    assert q.result(inv, timeout=5) == [3, 1] or q.result(inv, timeout=5) == (3, 1)\n"
        "print(json.dumps([m for m in sys.modules if m.startswith('opentelemetry')]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(out.stdout) == []
