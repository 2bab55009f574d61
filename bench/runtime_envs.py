"""A job's requirements built with uv on the daemon's box (issue 46): cold, warm, eight at once.

One small requirement from a local wheel folder (no registry: `UV_FIND_LINKS`, `UV_OFFLINE=1`),
built by the daemon's `Environments` (daemon/environments.py) as a job's claim would: a cold
build (uv's cache warm, as on a box that built before), a warm one (the environment is there),
and eight threads asking for one new environment at once (built once, the rest wait on it).
The floor, in the same run: `uv venv` plus `uv pip install` of the same wheel, by hand.
Ray's `runtime_env={"uv": [...]}` is the peer; it is left out where Ray is not installed.

Run alone: .venv/bin/python -m bench.runtime_envs
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .common import Measurement, Settings, bin_path, environ


def _wheels(root: Path) -> Path:
    from tests.support.wheels import write_wheel

    folder = root / "wheels"
    folder.mkdir()
    write_wheel(folder, "benchpkg", "1.0")
    return folder


def lakeshore(settings: Settings) -> list[Measurement]:
    from dreamlake.lakeshore.daemon.environments import Environments

    cold, warm, eight = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        wheels = _wheels(root)
        box = {"UV_FIND_LINKS": str(wheels), "UV_OFFLINE": "1", "UV_CACHE_DIR": str(root / "uv")}
        with environ(**box):
            for rep in range(settings.reps):
                envs = Environments(root / f"envs{rep}")
                envs.ensure([f"benchpkg==1.0 ; python_version >= '3.{rep}'"])  # uv's cache warm
                started = time.perf_counter()
                envs.ensure(["benchpkg==1.0"])
                cold.append(time.perf_counter() - started)
                started = time.perf_counter()
                envs.ensure(["benchpkg==1.0"])
                warm.append(time.perf_counter() - started)
                wanted = [f"benchpkg==1.0 ; python_version > '3.{rep + 1}'"]
                threads = [threading.Thread(target=envs.ensure, args=(wanted,)) for _ in range(8)]
                started = time.perf_counter()
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                eight.append(time.perf_counter() - started)
                assert envs.stats.misses == 3, envs.stats  # the eight built once
    note = "one local wheel, UV_OFFLINE=1, uv's cache warm"
    system = "lakeshore daemon environments"
    return [
        Measurement("envs", "cold build", system, _ms(cold), "ms", note=note),
        Measurement("envs", "warm (built)", system, _ms(warm), "ms", note=note),
        Measurement("envs", "8 jobs at once", system, _ms(eight), "ms", note=note),
    ]


def floor(settings: Settings) -> list[Measurement]:
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        wheels = _wheels(root)
        env = {**os.environ, "UV_FIND_LINKS": str(wheels), "UV_OFFLINE": "1"}
        env["UV_CACHE_DIR"] = str(root / "uv")
        uv = bin_path("uv")

        def build(name: str) -> None:
            venv = root / name
            subprocess.run(
                [uv, "venv", "-q", "--python", sys.executable, str(venv)], env=env, check=True
            )
            python = str(venv / "bin" / "python")
            subprocess.run(
                [uv, "pip", "install", "-q", "--python", python, "benchpkg==1.0"],
                env=env,
                check=True,
            )

        build("warm-up")
        for rep in range(settings.reps):
            started = time.perf_counter()
            build(f"v{rep}")
            times.append(time.perf_counter() - started)
    return [Measurement("envs", "cold build", "floor: uv venv + uv pip install", _ms(times), "ms")]


def ray(settings: Settings) -> list[Measurement]:
    """Ray's `runtime_env={"uv": [...]}` on the same wheel, in an interpreter of its own
    (bench/peers/ray_uv.py); left out where Ray or virtualenv is not installed."""
    import importlib.util
    import json

    from .peers.runs import ray_child

    if importlib.util.find_spec("virtualenv") is None:
        raise RuntimeError("virtualenv is not installed here (make bench installs it)")
    with tempfile.TemporaryDirectory() as tmp:
        wheels = _wheels(Path(tmp))
        args = json.dumps({"wheels": str(wheels), "reps": settings.reps})
        data = ray_child(args, module="ray_uv", cwd=Path(tmp), timeout=900)
    note = "one local wheel, UV_OFFLINE=1, a running local cluster"
    system = "ray runtime_env uv"
    return [
        Measurement("envs", "cold build", system, _ms(data["cold"]), "ms", note=note),
        Measurement("envs", "warm (built)", system, _ms(data["warm"]), "ms", note=note),
        Measurement("envs", "8 jobs at once", system, _ms(data["eight"]), "ms", note=note),
    ]


def _ms(seconds: list[float]) -> list[float]:
    return [s * 1000 for s in seconds]


if __name__ == "__main__":
    settings = Settings.make("--quick" in sys.argv)
    for m in lakeshore(settings) + floor(settings):
        print(f"{m.metric:>16} {m.system:<34} median {m.median:8.1f} ms  {m.values}")
