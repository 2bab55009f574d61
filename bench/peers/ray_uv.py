"""Ray's `runtime_env={"uv": [...]}`, in an interpreter of its own:
`python -m bench.peers.ray_uv '<json>'` (wheels, reps).

The peer of bench/runtime_envs.py: one small requirement from a local wheel folder
(`UV_FIND_LINKS`, `UV_OFFLINE=1` in the cluster's environment) on a local cluster that is up
first, its workers started. Cold: a task whose uv env Ray has not built; warm: the same env
again; eight: eight tasks of a new env at once (num_cpus=8). Each figure is from the submit to
the task's result. Ray's uv plugin needs `virtualenv` (the bench extra has it).
Prints one JSON line: {"cold": [s...], "warm": [s...], "eight": [s...]}.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    args = json.loads(sys.argv[1])
    os.environ.update({"UV_FIND_LINKS": args["wheels"], "UV_OFFLINE": "1"})
    import ray

    ray.init(
        num_cpus=8,
        include_dashboard=False,
        log_to_driver=False,
        logging_level="error",
        _node_ip_address="127.0.0.1",
    )

    @ray.remote
    def version() -> str:
        import importlib.metadata

        return importlib.metadata.version("benchpkg")

    @ray.remote
    def noop() -> None:
        return None

    ray.get(noop.remote())  # a worker up before anything is timed
    out: dict[str, list[float]] = {"cold": [], "warm": [], "eight": []}
    for rep in range(args["reps"]):
        env = {"uv": [f"benchpkg==1.0 ; python_version >= '3.{rep}'"]}
        for key in ("cold", "warm"):
            started = time.perf_counter()
            assert ray.get(version.options(runtime_env=env).remote()) == "1.0"
            out[key].append(time.perf_counter() - started)
        env = {"uv": [f"benchpkg==1.0 ; python_version > '3.{rep + 1}'"]}
        started = time.perf_counter()
        assert ray.get([version.options(runtime_env=env).remote() for _ in range(8)]) == ["1.0"] * 8
        out["eight"].append(time.perf_counter() - started)
    ray.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
