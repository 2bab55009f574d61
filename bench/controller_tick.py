"""One controller tick's cost at scale: 1,000 queues and 10,000 worker rows (not a test).

The plane holds 1,000 fully_elastic queues (half with a backlog), 10,000 live worker rows and
as many instances on the recording fake provider, 10 per queue, all idle so every tick has
real work (classifying each instance, deciding each queue). The first tick (which records an
event per queue) is reported apart from the steady ticks. SQLite always; Postgres with
--postgres URL (a scratch schema, dropped afterwards).
Run: .venv/bin/python -m bench.controller_tick [--queues 1000] [--workers 10000] [--ticks 10]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from dreamlake.lakeshore.controller.loop import Controller, Settings
from dreamlake.lakeshore.plane.dispatch import open_store
from dreamlake.lakeshore.plane.store import SqlStore
from dreamlake.lakeshore.providers.base import LaunchSpec
from dreamlake.lakeshore.providers.fake import FakeProvider
from dreamlake.lakeshore.types import SubmitRequest

NS = "bench"


#: --shape: each launch has 8 GPUs, and each job asks for 1, 2, 4 or 8 of them (packed).
SHAPE = {"gpus": 8, "gpu_type": "H100", "gpu_memory_gb": 80}


def populate(store: SqlStore, queues: int, workers: int, *, shaped: bool) -> FakeProvider:
    fake = FakeProvider("sim")
    store.add_provider(NS, "sim", "fake", {"shape": SHAPE} if shaped else {})
    per_queue = max(1, workers // queues)
    for i in range(queues):
        name = f"q{i:04d}"
        policy = {"kind": "fully_elastic", "max": per_queue, "idle_s": 3600, "provider": "sim"}
        store.create_queue(NS, name, elasticity=policy)
        if i % 2 == 0:
            store.submit(
                NS,
                name,
                [
                    SubmitRequest(
                        payload=b"x", resources={"gpus": 2 ** (j % 4)} if shaped else None
                    )
                    for j in range(per_queue)
                ],
            )
        spec = LaunchSpec(
            namespace=NS,
            queues=(name,),
            name=name,
            target=f"queue/{name}",
            settings={"shape": SHAPE} if shaped else {},  # as launched now: nothing to roll
        )
        for inst in fake.launch(spec, per_queue):
            store.register_worker(NS, inst.daemon, queues=[name])
    return fake


def measure(
    target: str, queues: int, workers: int, ticks: int, shaped: bool = False
) -> tuple[float, float, float]:
    store = open_store(target, durable=False) if "://" not in target else open_store(target)
    try:
        start = time.perf_counter()
        fake = populate(store, queues, workers, shaped=shaped)
        setup = time.perf_counter() - start
        controller = Controller(
            store, Settings(scale_down_window_s=3600), provider_factory=lambda _: fake
        )
        start = time.perf_counter()
        controller.tick()
        first = time.perf_counter() - start
        times = []
        for _ in range(ticks):
            start = time.perf_counter()
            controller.tick()
            times.append(time.perf_counter() - start)
        return setup, first, statistics.median(times)
    finally:
        store.close()


@contextlib.contextmanager
def sqlite_target() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        yield str(Path(tmp) / "lakeshore.db")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=10000)
    parser.add_argument("--ticks", type=int, default=10)
    parser.add_argument("--postgres", default=None, metavar="URL")
    parser.add_argument(
        "--shape",
        action="store_true",
        help="a provider launch shape (8 x H100) and jobs asking 1-8 GPUs: demand is packed",
    )
    args = parser.parse_args(argv)
    print(f"controller tick: {args.queues} queues, {args.workers} worker rows and instances")
    print(f"{'plane':<10} {'setup s':>9} {'first tick ms':>14} {'tick p50 ms':>12}")
    with sqlite_target() as path:
        setup, first, p50 = measure(path, args.queues, args.workers, args.ticks, args.shape)
    print(f"{'sqlite':<10} {setup:>9.1f} {first * 1000:>14.1f} {p50 * 1000:>12.1f}")
    if args.postgres:
        from dreamlake.lakeshore.plane.postgres import scratch_schema

        with scratch_schema(args.postgres, "lakeshore_bench") as url:
            setup, first, p50 = measure(url, args.queues, args.workers, args.ticks, args.shape)
        print(f"{'postgres':<10} {setup:>9.1f} {first * 1000:>14.1f} {p50 * 1000:>12.1f}")


if __name__ == "__main__":
    main()
