"""Ray's figures, in an interpreter of their own: `python -m bench.peers.ray_run '<json>'`.

RPC: `ray.get(noop.remote(i))` on a local cluster with num_cpus=1. Fan-out: a fresh local
cluster with num_cpus=2 (two worker processes), all refs submitted, then `ray.get` of all.
Map: `ray.get([noop.remote(x) for x in xs])` on num_cpus=2 (`ray_run map '<json>'`).
Prints one JSON line with the latencies and rates.
"""

from __future__ import annotations

import json
import sys
import time

import ray

from ..common import rpc_loop


@ray.remote
def noop(i: int = 0) -> int:
    return i


def init(cpus: int) -> None:
    ray.init(
        num_cpus=cpus,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=400 * 2**20,
        logging_level="error",
        _node_ip_address="127.0.0.1",
    )


@ray.remote
def echo(x: object) -> object:
    return x


def payload(a: dict[str, object]) -> None:
    """The payload suite: `ray.get(echo.remote(array))` per size, latencies in ms per rep."""
    import numpy as np

    init(1)
    out: dict[str, list[list[float]]] = {}
    for label, size in a["sizes"].items():  # type: ignore[attr-defined]
        data = np.arange(size // 4, dtype=np.float32)
        assert np.array_equal(ray.get(echo.remote(data)), data)
        reps = []
        for _ in range(a["reps"]):  # type: ignore[attr-defined]
            times = []
            for _ in range(a["calls"][label]):  # type: ignore[index]
                t0 = time.perf_counter()
                ray.get(echo.remote(data))
                times.append((time.perf_counter() - t0) * 1000)
            reps.append(times)
        out[label] = reps
    ray.shutdown()
    print(json.dumps(out))


def mapped(a: dict[str, int]) -> None:
    """The map suite: `ray.get([noop.remote(x) for x in xs])`, items/s per repetition, with
    `num_cpus=2` (as Lakeshore's two one-slot daemons). Ray has no chunking of its own: its
    users batch by hand, so only the one-task-per-item form is measured, at both sizes."""
    init(2)
    ray.get([noop.remote(0) for _ in range(100)])  # workers up
    out: dict[str, list[float]] = {"plain": [], "large": []}
    for _ in range(a["reps"]):
        for key, n in (("plain", a["plain"]), ("large", a["large"])):
            t0 = time.perf_counter()
            assert ray.get([noop.remote(x) for x in range(n)]) == list(range(n))
            out[key].append(n / (time.perf_counter() - t0))
    ray.shutdown()
    print(json.dumps(out))


def main() -> None:
    if sys.argv[1] == "payload":
        payload(json.loads(sys.argv[2]))
        return
    if sys.argv[1] == "map":
        mapped(json.loads(sys.argv[2]))
        return
    a = json.loads(sys.argv[1])
    init(1)
    ray.get([noop.remote(0) for _ in range(10)])  # workers up
    rpc = [
        rpc_loop(lambda i: ray.get(noop.remote(i)), a["calls"], a["cap"], a["warmup"])
        for _ in range(a["reps"])
    ]
    ray.shutdown()
    init(2)
    ray.get([noop.remote(0) for _ in range(100)])
    submit, complete = [], []
    n = a["jobs"]
    for _ in range(a["reps"]):
        t0 = time.perf_counter()
        refs = [noop.remote(i) for i in range(n)]
        submit.append(n / (time.perf_counter() - t0))
        ray.get(refs)
        complete.append(n / (time.perf_counter() - t0))
    ray.shutdown()
    print(json.dumps({"rpc": rpc, "submit": submit, "complete": complete}))


if __name__ == "__main__":
    main()
