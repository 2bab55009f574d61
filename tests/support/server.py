"""Start a real `lakeshore server` subprocess for a test, and stop it afterwards.

    with running_server(tmp_path) as (url, token):
        plane = HttpDispatch(url, token=token)

Readiness is polled on GET /v1/hello against a deadline; the pause between polls is a wait on
the process itself, so a server that dies on start fails the test at once with its log.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from . import BOX_VARS

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
LAUNCH = "from dreamlake.lakeshore.cli.main import main; main()"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESHORE_") or k in BOX_VARS}
    env["LAKESHORE_HOME"] = str(home)
    return env


def _wait_ready(
    proc: subprocess.Popen[bytes], url: str, log: Path, verify: ssl.SSLContext | bool = True
) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    with httpx.Client(timeout=1.0, verify=verify) as client:
        while time.monotonic() < deadline:
            try:
                if client.get(f"{url}/v1/hello").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.05)
                raise RuntimeError(
                    f"lakeshore server exited with {proc.returncode}:\n{log.read_text()}"
                )
    raise TimeoutError(f"lakeshore server not ready after {START_TIMEOUT_S}s:\n{log.read_text()}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass(frozen=True)
class StartedServer:
    url: str
    token: str  # the admin token of namespace `default`
    pid: int  # for tests that watch the process itself (its memory, its connections)


@contextlib.contextmanager
def server_process(
    home: Path,
    store: str | None = None,
    *,
    extra_args: tuple[str, ...] = (),
    ca_bundle: Path | None = None,
) -> Iterator[StartedServer]:
    """A server on a free port with LAKESHORE_HOME=`home`, stopped on exit; with `ca_bundle`,
    it serves https (extra_args carry --ssl-certfile/--ssl-keyfile) and is verified by it."""
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    args = [sys.executable, "-c", LAUNCH, "server", "--port", str(port), *extra_args]
    if store is not None:
        args += ["--store", store]
    log = home / f"server-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(args, env=server_env(home), stdout=out, stderr=subprocess.STDOUT)
    url = f"{'https' if ca_bundle else 'http'}://127.0.0.1:{port}"
    try:
        verify = ssl.create_default_context(cafile=str(ca_bundle)) if ca_bundle else True
        _wait_ready(proc, url, log, verify)
        token = (home / "token").read_text().strip()
        yield StartedServer(url, token, proc.pid)
    finally:
        _stop(proc)


@contextlib.contextmanager
def running_server(
    home: Path, store: str | None = None, *, extra_args: tuple[str, ...] = ()
) -> Iterator[tuple[str, str]]:
    """A server on a free port with LAKESHORE_HOME=`home`; yields (url, admin token)."""
    with server_process(home, store, extra_args=extra_args) as srv:
        yield srv.url, srv.token
