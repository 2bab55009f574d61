"""Rows become records through one generic mapping (`record_of`, issue 38): a field is the
column of its name unless a conversion is given, and only a field with a default may be absent."""

from __future__ import annotations

import json

import pytest

from dreamlake.lakeshore.plane.store.records import record_of, worker_info_of
from dreamlake.lakeshore.types import WorkerInfo

ROW = {
    "id": "w1",
    "namespace": "default",
    "name": "box-1",
    "queues": json.dumps(["gpu"]),
    "host": "box",
    "pid": 42,
    "info": "{}",
    "load": json.dumps({"slots": 2}),
    "state": "alive",
    "created_at": 1.0,
    "heartbeat_at": 2.0,
    "unrelated": "a column no field names",
}


def test_columns_are_copied_and_conversions_win() -> None:
    worker = worker_info_of(ROW)
    assert worker.name == "box-1" and worker.pid == 42 and worker.heartbeat_at == 2.0
    assert worker.queues == ["gpu"] and worker.load == {"slots": 2}  # converted from JSON


def test_a_missing_column_without_a_default_is_an_error() -> None:
    row = {k: v for k, v in ROW.items() if k != "name"}
    with pytest.raises(KeyError, match="name"):
        worker_info_of(row)


def test_a_field_with_a_default_may_be_missing_from_the_row() -> None:
    from dreamlake.lakeshore.types import Invocation

    fields = {
        "id": "i",
        "namespace": "n",
        "queue": "q",
        "state": "queued",
        "priority": 0.0,
        "key": None,
        "attempt": 0,
        "max_attempts": 3,
        "timeout_s": None,
        "kill_requested": False,
        "worker": None,
        "error": None,
        "result": None,
        "created_at": 1.0,
        "started_at": None,
        "finished_at": None,
    }
    inv = record_of(Invocation, fields)
    assert inv.pending_reason is None and inv.resources == {} and inv.preemptions == 0
    assert record_of(WorkerInfo, ROW, name="given").name == "given"
