"""What every suite of `make bench` shares: measurements, statistics, processes, loopback URLs.

A `Measurement` is one figure of one system, measured `reps` times in the same run (after a
warm-up); the table shows its median with min-max, and every ratio is against a peer measured
in the same run, so the noise of a shared machine mostly cancels. Nothing here talks to anything
but 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
AMQP_URL = os.environ.get("BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
POSTGRES_URL = (
    os.environ.get("BENCH_POSTGRES_URL")
    or os.environ.get("LAKESHORE_TEST_POSTGRES_URL")
    or "postgresql://postgres@127.0.0.1:5432/test"
)


@dataclass
class Settings:
    """How big a run is: `--quick` shrinks everything so a run takes about a minute or two."""

    quick: bool = False
    calls: int = 2000  # RPC calls per repetition
    jobs: int = 10_000  # fan-out jobs per repetition
    reps: int = 3
    warmup_calls: int = 100
    #: A repetition of RPC calls stops after this many seconds (polling peers at their
    #: defaults take ~100 ms to ~1 s a call: 2,000 of them would take the whole budget).
    rpc_cap_s: float = 6.0
    #: Likewise a fan-out repetition: what it drained by then gives the rate.
    fanout_cap_s: float = 25.0
    idle_s: float = 6.0
    scale_clients: int = 500
    scale_s: float = 8.0

    @classmethod
    def make(cls, quick: bool) -> Settings:
        if not quick:
            return cls()
        return cls(
            quick=True,
            calls=300,
            jobs=1000,
            reps=1,
            warmup_calls=20,
            rpc_cap_s=2.0,
            fanout_cap_s=10.0,
            idle_s=3.0,
            scale_clients=200,
            scale_s=3.0,
        )


@dataclass
class Measurement:
    """One figure of one system: every repetition's value, and what it was measured under."""

    suite: str  # "rpc", "fanout", "embedded", "idle", "scale", "postgres"
    metric: str  # e.g. "p50", "p99", "submit", "complete"
    system: str
    values: list[float]
    unit: str  # "ms" (lower is better), "ops/s" / "jobs/s" (higher), "%", "MiB"
    durability: str = ""  # "synchronous=FULL", "Redis, no persistence", ...
    note: str = ""
    n: int = 0  # calls or jobs per repetition
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    @property
    def lo(self) -> float:
        return min(self.values) if self.values else float("nan")

    @property
    def hi(self) -> float:
        return max(self.values) if self.values else float("nan")

    @property
    def lower_is_better(self) -> bool:
        return self.unit in ("ms", "%", "MiB", "s")

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(median=self.median, min=self.lo, max=self.hi)
        return d


def pct(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without LAKESHORE_* settings, with the repo importable (bench.*)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESHORE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


@contextlib.contextmanager
def environ(**values: str) -> Iterator[None]:
    """This process's environment with `values` set, restored afterwards (a job that plays
    another host, or a peer whose app reads its settings at import)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def bin_path(name: str) -> str:
    """A console script of this interpreter's environment (celery, rq, dramatiq, ...)."""
    return str(Path(sys.executable).parent / name)


@contextlib.contextmanager
def process(
    argv: Sequence[str], log: Path, env: dict[str, str] | None = None, stop_grace_s: float = 10.0
) -> Iterator[subprocess.Popen[bytes]]:
    """A child process (its own group) that is always stopped: SIGTERM, then SIGKILL the group."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            list(argv),
            env=env or clean_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
        )
        try:
            yield proc
        finally:
            stop(proc, stop_grace_s)


def stop(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # what the group left behind (prefork children)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


def wait_for(check: Callable[[], bool], timeout: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.05)
    tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
    raise TimeoutError(f"{what} not ready after {timeout}s\n{tail}")


def tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def cpu_seconds(procs: Sequence[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def rss_mib(procs: Sequence[psutil.Process]) -> float:
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total / 2**20


def idle_cost(pid: int, seconds: float) -> tuple[float, float]:
    """(CPU % of one core, RSS MiB) of a process tree left alone for `seconds`."""
    procs = tree(pid)
    before, t0 = cpu_seconds(procs), time.monotonic()
    time.sleep(seconds)
    used, elapsed = cpu_seconds(procs) - before, time.monotonic() - t0
    return 100 * used / elapsed, rss_mib(tree(pid))


def rpc_loop(call: Callable[[int], object], calls: int, cap_s: float, warmup: int) -> list[float]:
    """Latencies in ms of up to `calls` calls (fewer if `cap_s` runs out), after a warm-up."""
    for i in range(warmup):
        call(i)
    out: list[float] = []
    deadline = time.monotonic() + cap_s
    for i in range(calls):
        start = time.perf_counter()
        call(i)
        out.append((time.perf_counter() - start) * 1000)
        if time.monotonic() > deadline and len(out) >= 20:
            break
    return out


def rpc_measurements(
    system: str, reps: list[list[float]], durability: str, note: str = ""
) -> list[Measurement]:
    """p50 and p99 of each repetition's latencies; n is the calls of the smallest repetition."""
    n = min(len(r) for r in reps)
    return [
        Measurement("rpc", "p50", system, [pct(r, 50) for r in reps], "ms", durability, note, n),
        Measurement("rpc", "p99", system, [pct(r, 99) for r in reps], "ms", durability, note, n),
    ]


def log_dir() -> Path:
    path = Path(os.environ.get("BENCH_LOG_DIR") or "/tmp/lakeshore-bench-logs")
    path.mkdir(parents=True, exist_ok=True)
    return path


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
