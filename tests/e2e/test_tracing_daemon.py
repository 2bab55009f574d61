"""A real `lakeshore-daemon` continues the producer's trace in the child process that runs the job.

The daemon's children are fresh interpreters (spawn), so they record spans only if something
configures OpenTelemetry at their start. Here that is a `sitecustomize` module on PYTHONPATH,
the mechanism `opentelemetry-instrument` itself uses: it writes every finished span as a JSON
line to a file the test reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jobs
import pytest
from daemon_harness import JOBS_PATH

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane import Dispatch
from tests.support.daemons import DaemonProcess, wait_until

pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")

from opentelemetry.sdk.trace import TracerProvider

pytestmark = pytest.mark.slow

QUEUE = "traced"

SITECUSTOMIZE = """
import os

if os.environ.get("SPANS_FILE"):
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    _out = open(os.environ["SPANS_FILE"], "a", buffering=1)
    _provider = TracerProvider()
    _provider.add_span_processor(
        SimpleSpanProcessor(
            ConsoleSpanExporter(out=_out, formatter=lambda s: s.to_json(indent=None) + "\\n")
        )
    )
    trace.set_tracer_provider(_provider)
"""


@pytest.fixture
def spans_file(tmp_path: Path) -> Path:
    return tmp_path / "spans.jsonl"


@pytest.fixture
def daemon(tmp_path: Path, spans_file: Path) -> Iterator[DaemonProcess]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    proc = DaemonProcess(
        tmp_path / "home",
        "tracer",
        ["--queue", QUEUE],
        env={"SPANS_FILE": str(spans_file)},
        paths=(JOBS_PATH, str(site)),
    )
    try:
        yield proc.ready()
    finally:
        proc.stop()


def recorded(spans_file: Path, name: str) -> dict[str, Any] | None:
    if not spans_file.exists():
        return None
    for line in spans_file.read_text().splitlines():
        if line.strip():
            span = json.loads(line)
            if span["name"] == name:
                return dict(span)
    return None


def test_the_daemon_child_span_is_a_child_of_the_producer_span(
    tmp_path: Path, daemon: DaemonProcess, spans_file: Path
) -> None:
    # Given a producer span current at submit (this process's own provider: nothing global)
    tracer = TracerProvider().get_tracer("producer")
    with Dispatch(tmp_path / "home" / "lakeshore.db") as plane:
        q = dls.SyncQueue(QUEUE, dispatch=plane)
        with tracer.start_as_current_span("produce") as producer:
            inv = q.submit(dls.thunk(jobs.square, 7))

        # When the daemon's child runs it
        assert q.result(inv, timeout=30) == 49

    # Then the child recorded the job's span in the producer's trace, as its child
    job = wait_until(
        lambda: recorded(spans_file, f"process {QUEUE}"), timeout=20, what="the job's span"
    )
    parent = producer.get_span_context()
    assert job["context"]["trace_id"] == f"0x{parent.trace_id:032x}"
    assert job["parent_id"] == f"0x{parent.span_id:016x}"
    assert job["kind"] == "SpanKind.CONSUMER"
    assert job["attributes"]["lakeshore.invocation_id"] == inv
    assert job["attributes"]["lakeshore.outcome"] == "succeeded"
    assert job["attributes"]["lakeshore.queue_wait_s"] >= 0
    wait = recorded(spans_file, "queue wait")
    assert wait is not None and wait["parent_id"] == f"0x{parent.span_id:016x}"
