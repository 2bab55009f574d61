"""`lakeshore daemon show` reads a heartbeat that lacks figures (issue 45).

lakeshore-daemon sends cpu_percent, memory_percent and a full row per slot, but a heartbeat's
load is whatever its worker sent: a `run_worker` loop or a client of the HTTP API may send
less. The command used to end in `internal error: KeyError: 'cpu_percent'`; a figure that is
not there is now shown as '-'. Run as a real `lakeshore` process on the embedded plane of a
temporary home.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dreamlake.lakeshore.plane.default import open_plane
from tests.support.server import LAUNCH

WORKER = "box-7"


def show_with_load(home: Path, load: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> str:
    for name in [k for k in os.environ if k.startswith("LAKESHORE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("LAKESHORE_HOME", str(home))
    plane = open_plane(None, None, None)
    try:
        worker = plane.register_worker(WORKER, queues=["q"], info={"concurrency": 2})
        plane.heartbeat(worker.id, load)
    finally:
        plane.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESHORE_")}
    env["LAKESHORE_HOME"] = str(home)
    result = subprocess.run(
        [sys.executable, "-c", LAUNCH, "daemon", "show", WORKER, "--wide"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    return result.stdout


def heartbeat_line(shown: str) -> str:
    [line] = [ln for ln in shown.splitlines() if ln.startswith("heartbeat:")]
    return line


def test_a_load_without_cpu_or_memory_shows_dashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shown = show_with_load(tmp_path, {"busy": 0, "idle": 2}, monkeypatch)

    assert heartbeat_line(shown).endswith("cpu -  mem -"), shown
    assert "slots:      0/2 busy" in shown


def test_a_load_with_one_figure_shows_it_and_a_dash_for_the_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shown = show_with_load(tmp_path, {"busy": 1, "cpu_percent": 12.5}, monkeypatch)

    assert heartbeat_line(shown).endswith("cpu 12.5%  mem -"), shown


def test_a_slot_row_missing_its_fields_shows_dashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load = {
        "busy": 1,
        "memory_percent": 40,
        "slots": [{"invocation": "01J0000000000000000000000Z"}],
    }
    shown = show_with_load(tmp_path, load, monkeypatch)

    assert heartbeat_line(shown).endswith("cpu -  mem 40%"), shown
    [row] = [ln for ln in shown.splitlines() if "01J0000000000000000000000Z" in ln]
    assert row.split()[:2] == ["-", "-"], row  # no index, no state
