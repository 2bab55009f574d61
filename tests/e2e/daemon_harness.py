"""Starting real `lakeshore-daemon` processes for the daemon tests, and waiting on them.

Every wait has a deadline and re-checks real state (the plane, the daemon's JSON log, a marker
file a job wrote); none is a bare sleep standing in for synchronisation.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import jobs

from tests.support import daemons
from tests.support.daemons import DaemonProcess as _DaemonProcess
from tests.support.daemons import pid_alive, wait_until

__all__ = ["JOBS_PATH", "DaemonProcess", "daemon_env", "pid_alive", "wait_until"]

#: The folder `jobs` was imported from: the daemon's children import it from there too.
JOBS_PATH = str(Path(jobs.__file__).resolve().parents[len(jobs.__name__.split(".")) - 1])


def daemon_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    return daemons.daemon_env(home, extra, paths=(JOBS_PATH,))


class DaemonProcess(_DaemonProcess):
    """A daemon whose children import the e2e jobs module."""

    def __init__(
        self,
        home: Path,
        name: str,
        args: Sequence[str] = (),
        *,
        env: dict[str, str] | None = None,
    ) -> None:
        super().__init__(home, name, args, env=env, paths=(JOBS_PATH,))


def kill_local_daemons(state_dir: Path) -> None:
    """SIGKILL every daemon the local provider started under `state_dir` that still runs: a
    failed controller test never leaves daemons behind."""
    for path in state_dir.glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            pid = int(json.loads(path.read_text())["pid"])
            if pid_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def fake_nvidia_smi(folder: Path, count: int) -> Path:
    """A `nvidia-smi` that lists `count` GPUs, for testing the fallback path on a CPU box."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = "\n".join(
        f"{i}, GPU-0000000{i}-1111-2222-3333-44444444444{i}, NVIDIA H100 80GB HBM3, 81559 MiB"
        for i in range(count)
    )
    exe = folder / "nvidia-smi"
    exe.write_text(f"#!/bin/sh\ncat <<'EOF'\n{lines}\nEOF\n")
    exe.chmod(0o755)
    return folder


def iter_events(entries: list[dict[str, Any]], event: str) -> Iterator[dict[str, Any]]:
    return (e for e in entries if e.get("event") == event)
