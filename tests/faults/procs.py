"""Real processes for the fault tests: a `lakeshore server` that can be killed -9 and restarted
on the same port and store, and `lakeshore-daemon`s that can be killed, stopped and continued.

Every wait has a deadline and re-checks real state (an HTTP answer, a line of the daemon's JSON
log, a marker file); none is a bare sleep standing in for synchronisation.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from tests.support.daemons import DaemonProcess as _DaemonProcess
from tests.support.daemons import pid_alive, wait_until
from tests.support.server import LAUNCH, _wait_ready, free_port, server_env

__all__ = ["DaemonProcess", "ServerProcess", "pid_alive", "wait_until"]

T = TypeVar("T")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


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


class DaemonProcess(_DaemonProcess):
    """A daemon on the fault server; its children import the fault jobs from this folder."""

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
        extra = {
            "LAKESHORE_URL": url,
            "LAKESHORE_TOKEN": token,
            "LAKESHORE_NAMESPACE": namespace,
            **(env or {}),
        }
        super().__init__(
            home,
            name,
            args,
            env=extra,
            paths=(str(HERE), str(ROOT)),
            log_path=home / f"daemon-{log_name or name}.log",
        )
