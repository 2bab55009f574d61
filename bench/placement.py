"""Placement throughput (issue 34): no-op jobs of one GPU each on a daemon that declares 8 GPUs,
beside the same jobs with no request on 8 static slots (today's daemon). Embedded SQLite plane.

Each repetition submits `jobs` no-op thunks in one batch to a warm daemon and times from the
submit until the last one succeeded. The placed run pays what placement costs: a claim that
sends the free GPUs takes one job at a time, the daemon picks its GPU, writes the placement on
the row, and hands the job to a child that sees that GPU. A measurement, never a test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane import Dispatch

from .common import Measurement, Settings, say
from .daemon_bench import wait_ready

GPUS = 8


def _daemon(home: Path, name: str, queue: str, declared: bool) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESHORE_")}
    env["LAKESHORE_HOME"] = str(home)
    args = ["--gpus", str(GPUS), "--gpu-type", "NVIDIA H100"] if declared else []
    log = open(home / f"{name}.log", "wb")  # noqa: SIM115 - lives as long as the daemon
    command = [sys.executable, "-m", "dreamlake.lakeshore.daemon", "--name", name]
    command += ["--queue", queue, "--concurrency", str(GPUS), "--log-json", "--log-level"]
    return subprocess.Popen(
        [*command, "warning", *args],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def _run(settings: Settings, declared: bool) -> list[float]:
    jobs = 1000 if settings.quick else settings.jobs
    rates = []
    with tempfile.TemporaryDirectory(prefix="lakeshore-placement-") as tmp:
        home = Path(tmp)
        with Dispatch(home / "lakeshore.db") as plane:
            q = dls.SyncQueue("place", dispatch=plane)
            proc = _daemon(home, "placer", "place", declared)
            try:
                wait_ready(plane, "placer", GPUS)
                ask = {"gpus": 1} if declared else None
                for rep in range(settings.reps):
                    thunks = [dls.thunk(int) for _ in range(jobs)]
                    t0 = time.perf_counter()
                    ids = q.submit_many(thunks, resources=ask)
                    for inv in ids:
                        q.result(inv, timeout=600)
                    rates.append(jobs / (time.perf_counter() - t0))
                    say(f"  placement declared={declared} rep {rep}: {rates[-1]:.0f} jobs/s")
            finally:
                proc.terminate()
                proc.wait(30)
    return rates


def placed(settings: Settings) -> list[Measurement]:
    jobs = 1000 if settings.quick else settings.jobs
    return [
        Measurement(
            "placement",
            "complete",
            f"lakeshore daemon --gpus {GPUS}, gpus=1 jobs",
            _run(settings, True),
            "jobs/s",
            durability="synchronous=FULL",
            note="one claim per job (GPUs are counted), placement written on each row",
            n=jobs,
        )
    ]


def static(settings: Settings) -> list[Measurement]:
    jobs = 1000 if settings.quick else settings.jobs
    return [
        Measurement(
            "placement",
            "complete",
            f"lakeshore daemon -c {GPUS}, static slots, no request",
            _run(settings, False),
            "jobs/s",
            durability="synchronous=FULL",
            note="today's daemon: batched claims, nothing placed",
            n=jobs,
        )
    ]
