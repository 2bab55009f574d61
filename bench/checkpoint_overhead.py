"""Issue 35's figures: what a checkpoint costs beside its floor, and how soon a notice requeues.

    .venv/bin/python -m bench.checkpoint_overhead [--reps N] [--sizes-mib 1,256]

- `dls.run.checkpoint(array)` of 1 MiB and 256 MiB, timed inside the job body, in `run_worker`
  (inline: the core stores it) and in a `lakeshore-daemon` child (the state goes up the child's
  pipe, the daemon stores it), on the embedded SQLite plane with `file://` storage; beside the
  floor: writing the same encoded bytes to a file in the same folder with fsync.
- Notice to requeue: SIGTERM to a daemon whose job waits on `dls.run.preempting`, checkpoints a
  small state and raises `dls.Preempted`, until the row reads `queued` (polled every 2 ms).

Medians of `--reps` runs, min-max beside. Nothing but this box is involved.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import dreamlake.lakeshore as dls

ROOT = Path(__file__).resolve().parent.parent


def checkpoint_times(size: int, reps: int) -> list[float]:
    """The job body: checkpoint `size` bytes `reps` times, timing each call."""
    data = np.random.default_rng(0).integers(0, 255, size, dtype=np.uint8)
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        dls.run.checkpoint(data)
        times.append(time.perf_counter() - started)
    return times


def waits_for_notice() -> str:
    """The job body for notice-to-requeue: stop at the notice with a small checkpoint."""
    while not dls.run.preempting.wait(1.0):
        pass
    dls.run.checkpoint({"step": 1})
    raise dls.Preempted()


def floor_times(size: int, reps: int, folder: Path) -> list[float]:
    data = dls.encode(np.random.default_rng(0).integers(0, 255, size, dtype=np.uint8))
    times = []
    for i in range(reps):
        path = folder / f"floor-{i}"
        started = time.perf_counter()
        with path.open("wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        times.append(time.perf_counter() - started)
        path.unlink()
    return times


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESHORE_")}
    env |= {
        "LAKESHORE_HOME": str(home),
        "LAKESHORE_STORAGE": (home / "storage").as_uri(),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    return env


def _daemon(home: Path, name: str, queue: str) -> subprocess.Popen[bytes]:
    log = (home / f"{name}.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dreamlake.lakeshore.daemon",
            "-q",
            queue,
            "--name",
            name,
            "--log-json",
            "--log-level",
            "debug",
        ],
        env=_env(home),
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while b"worker.ready" not in (home / f"{name}.log").read_bytes():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"daemon {name} did not start: {(home / f'{name}.log').read_text()}")
        time.sleep(0.05)
    return proc


def _in_home(home: Path) -> None:
    for key, value in _env(home).items():
        if key.startswith("LAKESHORE_"):
            os.environ[key] = value


def inline_times(home: Path, size: int, reps: int) -> list[float]:
    _in_home(home)
    q = dls.SyncQueue("ck-inline")
    inv = q.submit(dls.thunk(checkpoint_times, size, reps))
    dls.run_worker(q, once=True)
    return list(q.result(inv, timeout=600))


def daemon_times(home: Path, size: int, reps: int) -> list[float]:
    _in_home(home)
    proc = _daemon(home, "ck", "ck-daemon")
    try:
        q = dls.SyncQueue("ck-daemon")
        return list(q.result(q.submit(dls.thunk(checkpoint_times, size, reps)), timeout=600))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def notice_to_requeue(home: Path, reps: int) -> list[float]:
    _in_home(home)
    q = dls.SyncQueue("notice")
    out = []
    for i in range(reps):
        proc = _daemon(home, f"notice-{i}", "notice")
        inv = q.submit(dls.thunk(waits_for_notice), max_attempts=1)
        while q.status(inv).state != "running":
            time.sleep(0.01)
        time.sleep(0.5)  # the child is in its wait, past the claim's hand-off
        started = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        while q.status(inv).state != "queued":
            time.sleep(0.002)
        out.append(time.perf_counter() - started)
        proc.wait(60)
        q.cancel(inv)
    return out


def _row(name: str, times: list[float], floor: list[float] | None = None) -> str:
    med = statistics.median(times)
    text = f"{name:<44} {med * 1000:10.2f} ms  ({min(times) * 1000:.2f}-{max(times) * 1000:.2f})"
    if floor:
        text += f"  {med / statistics.median(floor):6.2f}x the floor"
    return text


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--sizes-mib", default="1,256")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes_mib.split(",")]
    with tempfile.TemporaryDirectory(prefix="ck-bench-") as tmp:
        home = Path(tmp)
        (home / "storage").mkdir()
        results: dict[str, Any] = {}
        for mib in sizes:
            size = mib << 20
            floor = floor_times(size, args.reps, home / "storage")
            print(_row(f"write+fsync {mib} MiB (floor)", floor), flush=True)
            print(
                _row(
                    f"checkpoint {mib} MiB, run_worker", inline_times(home, size, args.reps), floor
                ),
                flush=True,
            )
            print(
                _row(
                    f"checkpoint {mib} MiB, daemon child",
                    daemon_times(home, size, args.reps),
                    floor,
                ),
                flush=True,
            )
        results["notice"] = notice_to_requeue(home, args.reps)
        print(_row("notice (SIGTERM) -> requeued", results["notice"]), flush=True)


if __name__ == "__main__":
    main()
