"""Ray's `runtime_env={"working_dir": DIR}`, in an interpreter of its own:
`python -m bench.peers.ray_workdir '<json>'` (DIR, reps).

The peer of bench/runtime_ship.py: a local cluster (`ray.init`, num_cpus=1) is up first, as a
Lakeshore daemon is; each driver job then connects with the folder as its working_dir, and the
figure is from that connect (the job's submission: Ray zips and uploads the folder, a worker
downloads and unpacks it) to the first line of a task running in it. Cold: a folder Ray has not
seen; then after a one-file edit (a new zip: Ray keys working_dirs by their content hash).
Prints one JSON line: {"cold": [s...], "edited": [s...]}.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

DRIVER = """
import sys, time, ray
started = time.time()  # after the driver's own start and `import ray`: the submission itself
ray.init(address=sys.argv[1], runtime_env={"working_dir": sys.argv[3]}, log_to_driver=False,
         logging_level="error")

@ray.remote
def first_line():
    return time.time()

print(repr(ray.get(first_line.remote()) - started))
"""


def main() -> None:
    args = json.loads(sys.argv[1])
    folder = Path(args["dir"])
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    head = subprocess.run(
        [
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "start",
            "--head",
            "--num-cpus=1",
            "--include-dashboard=false",
            "--node-ip-address=127.0.0.1",
            "--port=0",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    address = (
        next(line.split("'")[1] for line in head.stdout.splitlines() if "ray.init(address=" in line)
        if "ray.init(address=" in head.stdout
        else "auto"
    )
    out: dict[str, list[float]] = {"cold": [], "edited": []}
    try:
        for rep in range(args["reps"]):
            (folder / "bench-rep.txt").write_text(f"rep {rep}\n")  # a folder Ray has not seen
            out["cold"].append(_job(address, folder, env))
            (folder / "pkg3" / "f345.bin").write_bytes(os.urandom(25 * 1024))
            out["edited"].append(_job(address, folder, env))
    finally:
        subprocess.run(
            [sys.executable, "-m", "ray.scripts.scripts", "stop", "--force"],
            env=env,
            capture_output=True,
            check=False,
        )
    print(json.dumps(out))


def _job(address: str, folder: Path, env: dict[str, str]) -> float:
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, address, "-", str(folder)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return float(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
