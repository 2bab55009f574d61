"""Starting real `lakeshore-daemon` processes for the daemon tests, and waiting on them.

Every wait has a deadline and re-checks real state (the plane, the daemon's JSON log, a marker
file a job wrote); none is a bare sleep standing in for synchronisation.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import jobs

T = TypeVar("T")

#: The folder `jobs` was imported from: the daemon's children import it from there too.
JOBS_PATH = str(Path(jobs.__file__).resolve().parents[len(jobs.__name__.split(".")) - 1])


def wait_until(
    check: Callable[[], T | None], *, timeout: float = 20.0, what: str = "condition"
) -> T:
    """Re-check until `check` returns something truthy; fail with `what` at the deadline."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def daemon_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LAKESHORE_", "NOTIFY_SOCKET", "WATCHDOG_"))
    }
    env["LAKESHORE_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (JOBS_PATH, os.environ.get("PYTHONPATH", "")) if p
    )
    env.update(extra or {})
    return env


class DaemonProcess:
    """One daemon subprocess logging JSON lines to a file the test can read."""

    def __init__(
        self,
        home: Path,
        name: str,
        args: Sequence[str] = (),
        *,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.log_path = home / f"{name}.log"
        self._log_file = open(self.log_path, "wb")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dreamlake.lakeshore.daemon",
                "--name",
                name,
                "--log-json",
                *args,
            ],
            env=daemon_env(home, env),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line still being written
        return out

    def find(self, event: str, **fields: Any) -> dict[str, Any] | None:
        for entry in self.events():
            if entry.get("event") == event and all(entry.get(k) == v for k, v in fields.items()):
                return entry
        return None

    def wait_for(self, event: str, timeout: float = 30.0, **fields: Any) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            if self.proc.poll() is not None and self.find(event, **fields) is None:
                raise AssertionError(
                    f"daemon {self.name} exited ({self.proc.returncode}) before {event}:\n"
                    + self.log_path.read_text(errors="replace")[-4000:]
                )
            return self.find(event, **fields)

        return wait_until(check, timeout=timeout, what=f"{event} {fields} from {self.name}")

    def ready(self, timeout: float = 60.0) -> DaemonProcess:
        self.wait_for("daemon.ready", timeout=timeout)
        return self

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def wait(self, timeout: float = 30.0) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self._log_file.close()

    def stop(self) -> None:
        """Cleanup: drain politely, then make sure it is gone."""
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log_file.close()

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0): look at its state
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


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
