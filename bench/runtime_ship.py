"""Shipping a workdir (issue 46): submit to the job's first line of user code, beside the floor.

A 50 MiB folder of 2,000 files goes with `runtime=Runtime(workdir=DIR)` to a real daemon in an
empty folder on an embedded SQLite plane; the job is a command that prints the time it started.
Measured: a cold submit (fresh plane, fresh daemon cache), then a submit after a one-file edit
(one blob uploaded, one fetched, the tree laid out again), and the same job with no workdir.
The floor, in the same run: `tar -cf` of the folder, and `cp -r` of it (what a cache copy costs).
Ray's `runtime_env={"working_dir": DIR}` is the peer; it is left out where Ray is not installed.

Run alone: .venv/bin/python -m bench.runtime_ship
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .common import Measurement, Settings, bin_path, clean_env, process, say, wait_for

FILES = 2000
FILE_BYTES = 25 * 1024  # 2,000 of them: 50 MiB
QUEUE = "bench-rt"
FIRST_LINE = "python -c 'import time; print(repr(time.time()))'"


def make_folder(root: Path) -> Path:
    folder = root / "workdir"
    for i in range(FILES):
        sub = folder / f"pkg{i // 100}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"f{i}.bin").write_bytes(os.urandom(FILE_BYTES))
    return folder


@contextmanager
def daemon(home: Path) -> Iterator[None]:
    empty = home / "elsewhere"
    empty.mkdir(parents=True, exist_ok=True)
    env = clean_env(LAKESHORE_HOME=str(home))
    argv = [bin_path("lakeshore-daemon"), "--queue", QUEUE, "--concurrency", "1", "--log-json"]
    log = home / "daemon.log"
    with process(argv, log, env=env):
        wait_for(lambda: "worker.ready" in log.read_text(), 60, "daemon", log)
        yield


def first_line_s(q: object, runtime: object) -> float:
    """Seconds from the submit to the job's first printed line (its own clock, same box)."""
    from dreamlake.lakeshore.envelope import Envelope

    started = time.time()
    inv = q.submit(envelope=Envelope.for_exec(FIRST_LINE), runtime=runtime)  # type: ignore[attr-defined]
    for line in q.stream(inv, timeout=120):  # type: ignore[attr-defined]
        return float(line) - started
    raise RuntimeError("the job printed nothing")


def lakeshore(settings: Settings) -> list[Measurement]:
    import dreamlake.lakeshore as dls
    from dreamlake.lakeshore.plane import Dispatch

    cold, edited, plain = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        folder = make_folder(Path(tmp))
        for rep in range(settings.reps):
            home = Path(tmp) / f"home{rep}"
            home.mkdir()
            with daemon(home), Dispatch(str(home / "lakeshore.db")) as plane:
                q = dls.SyncQueue(QUEUE, dispatch=plane)
                first_line_s(q, None)  # the child is warm before anything is timed
                plain.append(first_line_s(q, None))
                runtime = dls.Runtime(workdir=folder)
                cold.append(first_line_s(q, runtime))
                (folder / "pkg3" / "f345.bin").write_bytes(os.urandom(FILE_BYTES))
                edited.append(first_line_s(q, runtime))
            say(
                f"  rep {rep}: cold {cold[-1]:.3f}s, edited {edited[-1]:.3f}s, "
                f"plain {plain[-1]:.3f}s"
            )
    note = f"{FILES} files, {FILES * FILE_BYTES >> 20} MiB, a daemon in another folder"
    return [
        Measurement("runtime", "cold workdir", "lakeshore embedded", _ms(cold), "ms", note=note),
        Measurement(
            "runtime", "after one edit", "lakeshore embedded", _ms(edited), "ms", note=note
        ),
        Measurement("runtime", "no workdir", "lakeshore embedded", _ms(plain), "ms", note=note),
    ]


def floors(settings: Settings) -> list[Measurement]:
    tars, copies = [], []
    with tempfile.TemporaryDirectory() as tmp:
        folder = make_folder(Path(tmp))
        for rep in range(settings.reps):
            started = time.perf_counter()
            subprocess.run(
                ["tar", "-cf", str(Path(tmp) / f"w{rep}.tar"), "-C", str(folder), "."], check=True
            )
            tars.append(time.perf_counter() - started)
            started = time.perf_counter()
            shutil.copytree(folder, Path(tmp) / f"copy{rep}")
            copies.append(time.perf_counter() - started)
    note = f"{FILES} files, {FILES * FILE_BYTES >> 20} MiB"
    return [
        Measurement(
            "runtime", "cold workdir", "floor: tar -cf of the folder", _ms(tars), "ms", note=note
        ),
        Measurement(
            "runtime", "cold workdir", "floor: copy of the folder", _ms(copies), "ms", note=note
        ),
    ]


def ray(settings: Settings) -> list[Measurement]:
    """Ray's `runtime_env={"working_dir": DIR}` on a folder of the same shape, in an
    interpreter of its own (bench/peers/ray_workdir.py); left out where Ray is not installed."""
    import json

    from .peers.runs import ray_child

    with tempfile.TemporaryDirectory() as tmp:
        folder = make_folder(Path(tmp))
        args = json.dumps({"dir": str(folder), "reps": settings.reps})
        data = ray_child(args, module="ray_workdir")
    note = f"{FILES} files, {FILES * FILE_BYTES >> 20} MiB, a running local cluster"
    system = "ray runtime_env working_dir"
    return [
        Measurement("runtime", "cold workdir", system, _ms(data["cold"]), "ms", note=note),
        Measurement("runtime", "after one edit", system, _ms(data["edited"]), "ms", note=note),
    ]


def _ms(seconds: list[float]) -> list[float]:
    return [s * 1000 for s in seconds]


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    for m in lakeshore(Settings.make(quick)) + floors(Settings.make(quick)):
        print(f"{m.metric:>16} {m.system:<32} median {m.median:8.1f} ms  {m.values}")
