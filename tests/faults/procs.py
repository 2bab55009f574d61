"""Real processes for the fault tests: a `lakeshore server` that can be killed -9 and restarted
on the same port and store, and `lakeshore-daemon`s that can be killed, stopped and continued.

Every wait has a deadline and re-checks real state (an HTTP answer, a line of the daemon's JSON
log, a marker file); none is a bare sleep standing in for synchronisation.
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

from tests.support.server import LAUNCH, _wait_ready, free_port, server_env

T = TypeVar("T")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def wait_until(check: Callable[[], T | None], *, timeout: float = 20.0, what: str = "it") -> T:
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


class ServerProcess:
    """`lakeshore server` on a fixed port: start, kill -9, restart on the same store."""

    def __init__(
        self,
        home: Path,
        store: str | None = None,
        *,
        port: int | None = None,
        args: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.home = home
        self.store = store
        self.port = port or free_port()
        self.args = list(args)
        self.env = env or {}
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        home.mkdir(parents=True, exist_ok=True)

    @property
    def token(self) -> str:
        return (self.home / "token").read_text().strip()

    @property
    def log_path(self) -> Path:
        return self.home / f"server-{self.port}-{self.starts}.log"

    def start(self) -> ServerProcess:
        self.starts += 1
        argv = [sys.executable, "-c", LAUNCH, "server", "--port", str(self.port), *self.args]
        if self.store is not None:
            argv += ["--store", self.store]
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                argv,
                env={**server_env(self.home), **self.env},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        _wait_ready(self.proc, self.url, self.log_path)
        return self

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill9()

    def logs(self) -> str:
        return "".join(p.read_text(errors="replace") for p in self.home.glob("server-*.log"))

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def daemon_env(home: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LAKESHORE_", "NOTIFY_SOCKET", "WATCHDOG_"))
    }
    env["LAKESHORE_HOME"] = str(home)
    # The fault jobs are pickled by reference: the daemon's children import them from here.
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")) if p
    )
    env.update(extra)
    return env


class DaemonProcess:
    """One `lakeshore-daemon` logging JSON lines to a file the test reads."""

    def __init__(
        self,
        home: Path,
        name: str,
        args: Sequence[str],
        *,
        url: str,
        token: str,
        namespace: str = "default",
        env: dict[str, str] | None = None,
        log_name: str | None = None,
    ) -> None:
        self.name = name
        home.mkdir(parents=True, exist_ok=True)
        self.log_path = home / f"daemon-{log_name or name}.log"
        self._log = self.log_path.open("wb")
        extra = {
            "LAKESHORE_URL": url,
            "LAKESHORE_TOKEN": token,
            "LAKESHORE_NAMESPACE": namespace,
            **(env or {}),
        }
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
            env=daemon_env(home, extra),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
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

    def find(self, event: str, **fields: Any) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events()
            if e.get("event") == event and all(e.get(k) == v for k, v in fields.items())
        ]

    def wait_for(self, event: str, timeout: float = 30.0, **fields: Any) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            found = self.find(event, **fields)
            if not found and self.proc.poll() is not None:
                raise AssertionError(
                    f"daemon {self.name} exited ({self.proc.returncode}) before {event}:\n"
                    + self.log_tail()
                )
            return found[0] if found else None

        return wait_until(check, timeout=timeout, what=f"{event} {fields} from {self.name}")

    def ready(self, timeout: float = 60.0) -> DaemonProcess:
        self.wait_for("daemon.ready", timeout=timeout)
        return self

    def send(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def kill9(self) -> None:
        self.send(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.send(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
            self.send(signal.SIGTERM)
            self.send(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
