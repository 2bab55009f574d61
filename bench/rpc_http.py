"""Local `q.call` round trip: over HTTP (a real `lakeshore server`) vs the embedded plane.

One producer thread calls `q.call(i)` in a loop; one `run_worker` thread serves the queue on the
same plane kind (an `HttpDispatch` of its own for HTTP, the same `Dispatch` in-process).
Each call is submit + claim + ack + result: three durable commits plus, over HTTP, three or four
requests (the claim and the result are long-polls that the commits wake).
Run: .venv/bin/python -m bench.rpc_http [--calls N]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane import Plane

from .report import Row, render

LAUNCH = "from dreamlake.lakeshore.cli.main import main; main()"
WARMUP = 100


@contextlib.contextmanager
def server(home: Path) -> Iterator[tuple[str, str]]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESHORE_")}
    env["LAKESHORE_HOME"] = str(home)
    home.mkdir(parents=True, exist_ok=True)
    log = (home / "server.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCH, "server", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        with httpx.Client() as client:
            while True:
                try:
                    client.get(f"{url}/v1/hello").raise_for_status()
                    break
                except httpx.TransportError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise RuntimeError((home / "server.log").read_text()) from None
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=0.05)
        yield url, (home / "token").read_text().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def measure(producer: Plane, worker: Plane, calls: int) -> list[float]:
    """Latencies in ms of `calls` round trips, after a warm-up."""
    q = dls.SyncQueue("rpc", dispatch=producer)
    stop = threading.Event()
    thread = threading.Thread(
        target=dls.run_worker,
        args=(worker, ["rpc"]),
        kwargs={"stop": stop, "handler": lambda x: x},
        daemon=True,
    )
    thread.start()
    try:
        for i in range(WARMUP):
            q.call(i, timeout=10)
        out = []
        for i in range(calls):
            start = time.perf_counter()
            q.call(i, timeout=10)
            out.append((time.perf_counter() - start) * 1000)
        return out
    finally:
        stop.set()
        thread.join(timeout=5)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args(argv)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        with (
            server(home / "srv") as (url, token),
            dls.HttpDispatch(url, token=token) as prod,
            dls.HttpDispatch(url, token=token) as work,
        ):
            http = measure(prod, work, args.calls)
        with dls.Dispatch(home / "embedded.db") as plane:
            embedded = measure(plane, plane, args.calls)
    for name, lat in (("http (lakeshore server)", http), ("embedded Dispatch", embedded)):
        note = f"mean {statistics.fmean(lat):.2f} ms, n={len(lat)}"
        rows.append(Row("q.call p50", name, pct(lat, 50), "ms", note))
        rows.append(Row("q.call p99", name, pct(lat, 99), "ms"))
    render(
        "local q.call round trip",
        rows,
        {"q.call p50": "embedded Dispatch", "q.call p99": "embedded Dispatch"},
    )


if __name__ == "__main__":
    main(sys.argv[1:])
