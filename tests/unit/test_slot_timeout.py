"""The run timeout is checked in one place, `SlotBase` (issue 38): every kind of slot asks it
when its job's time is up and what that ends as, instead of each writing the rule again."""

from __future__ import annotations

import ast
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dreamlake.lakeshore.work.slot import DEADLINE_WAIT_CHUNK_S, SlotBase

ROOT = Path(__file__).resolve().parents[2]
#: The kinds of slot: the daemon's process slot and the in-process (run_worker) slot.
KINDS = ("daemon/slots.py", "sdk/work/inline.py")


def _claim(timeout_s: float | None) -> Any:
    return SimpleNamespace(timeout_s=timeout_s)  # the one field the rule reads


def test_a_job_without_a_timeout_never_times_out() -> None:
    assert SlotBase._run_deadline(_claim(None), time.monotonic()) is None
    assert SlotBase._timed_out(_claim(None), None) is None
    assert SlotBase._until(None) is None


def test_a_passed_deadline_is_a_timeout_naming_the_limit() -> None:
    claim = _claim(2.5)
    deadline = SlotBase._run_deadline(claim, time.monotonic() - 10.0)
    outcome = SlotBase._timed_out(claim, deadline)
    assert outcome is not None and outcome.kind == "timeout"
    assert outcome.error == "exceeded its timeout_s of 2.5s"
    assert SlotBase._until(deadline) == 0.0


def test_a_deadline_ahead_is_waited_for_in_chunks() -> None:
    claim = _claim(10 * DEADLINE_WAIT_CHUNK_S)
    deadline = SlotBase._run_deadline(claim, time.monotonic())
    assert SlotBase._timed_out(claim, deadline) is None
    assert SlotBase._until(deadline) == DEADLINE_WAIT_CHUNK_S


@pytest.mark.parametrize("rel", KINDS)
def test_no_slot_kind_reads_a_timeout_of_its_own(rel: str) -> None:
    tree = ast.parse((ROOT / rel).read_text(), rel)
    reads = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "timeout_s"
    ]
    assert reads == [], f"{rel} reads timeout_s: the rule lives in SlotBase"
