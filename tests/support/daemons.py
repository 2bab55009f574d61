"""Real `lakeshore-daemon` processes for tests: start them, read their JSON log, signal them.

Every wait has a deadline and re-checks real state (the plane, a line of the daemon's log, a
marker file a job wrote); none is a bare sleep standing in for synchronisation.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from . import BOX_VARS

T = TypeVar("T")

DAEMON = (sys.executable, "-m", "dreamlake.lakeshore.daemon")


def wait_until(
    check: Callable[[], T | None], *, timeout: float = 20.0, what: str = "condition"
) -> T:
    """Re-check until `check` returns something truthy; fail naming `what` at the deadline."""
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


def daemon_env(
    home: Path, extra: dict[str, str] | None = None, paths: Sequence[str] = ()
) -> dict[str, str]:
    """This environment minus Lakeshore's and systemd's variables; `paths` lead PYTHONPATH so
    the daemon's children import test jobs by reference."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LAKESHORE_", "NOTIFY_SOCKET", "WATCHDOG_")) or k in BOX_VARS
    }
    env["LAKESHORE_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (*paths, os.environ.get("PYTHONPATH", "")) if p)
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
        paths: Sequence[str] = (),
        log_path: Path | None = None,
        cwd: Path | None = None,
        command: Sequence[str] = DAEMON,
    ) -> None:
        """`command` starts the daemon (default `python -m ...`; the `lakeshore-daemon` script
        differs in what it can import from `cwd`)."""
        self.name = name
        home.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path or home / f"{name}.log"
        self._log_file = open(self.log_path, "wb")  # noqa: SIM115 - closed in wait()/stop()
        self.proc = subprocess.Popen(
            [*command, "--name", name, "--log-json", *args],
            env=daemon_env(home, env, paths),
            cwd=cwd,
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

    def find_all(self, event: str, **fields: Any) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events()
            if e.get("event") == event and all(e.get(k) == v for k, v in fields.items())
        ]

    def find(self, event: str, **fields: Any) -> dict[str, Any] | None:
        found = self.find_all(event, **fields)
        return found[0] if found else None

    def wait_for(self, event: str, timeout: float = 30.0, **fields: Any) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            found = self.find(event, **fields)
            if found is None and self.proc.poll() is not None:
                raise AssertionError(
                    f"daemon {self.name} exited ({self.proc.returncode}) before {event}:\n"
                    + self.log_tail()
                )
            return found

        return wait_until(check, timeout=timeout, what=f"{event} {fields} from {self.name}")

    def ready(self, timeout: float = 60.0) -> DaemonProcess:
        self.wait_for("worker.ready", timeout=timeout)
        return self

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def kill9(self) -> None:
        self.signal(signal.SIGKILL)
        self.proc.wait(10)

    def wait(self, timeout: float = 30.0) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self._log_file.close()

    def stop(self) -> None:
        """Cleanup: drain politely, then make sure it is gone."""
        if self.proc.poll() is None:
            self.signal(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
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
