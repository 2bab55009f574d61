"""`make demo`: the main job on the embedded default plane, with nothing else running.

A producer fans out udf calls and a streaming "training" generator to the box's SQLite plane
under $LAKESHORE_HOME (default ~/.lakeshore); two worker processes share that file, claim the
jobs, and stream frames back. Results arrive by durable id, frames arrive live.
"""

from __future__ import annotations

import importlib.util
import math
import os
import shutil
import subprocess
import sys
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

import dreamlake.lakeshore as dls

QUEUE = "demo"
FAN_OUT = 200
console = Console()
q = dls.SyncQueue(QUEUE)


@dls.udf(queue=q)
def score(seed: int) -> float:
    """A stand-in for an evaluation: deterministic, cheap."""
    return round(math.sin(seed) ** 2, 4)


@dls.udf(queue=q)
def train(steps: int):  # type: ignore[no-untyped-def]
    """A stand-in for a training run: each yield is a VALUE frame, the return value the result."""
    loss = 2.0
    for step in range(steps):
        time.sleep(0.05)
        loss *= 0.8
        yield {"step": step, "loss": round(loss, 4)}
    return {"final_loss": round(loss, 4)}


def start_workers(n: int) -> list[subprocess.Popen[bytes]]:
    """Worker daemons on this box: they share the SQLite plane with this script."""
    daemon = shutil.which("lakeshore-daemon", path=os.path.dirname(sys.executable))
    if daemon and importlib.util.find_spec("dreamlake.lakeshore.daemon.main"):
        cmd = [daemon, "--queue", QUEUE, "--concurrency", "2"]
    else:  # the in-process worker loop, in its own process
        cmd = [
            sys.executable,
            "-c",
            f"import dreamlake.lakeshore as d; d.run_worker(queues=[{QUEUE!r}])",
        ]
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.abspath(__file__))}
    return [
        subprocess.Popen(
            [*cmd, *(["--name", f"demo-{i}"] if cmd[0] == daemon else [])],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(n)
    ]


def main() -> None:
    plane = q.dispatch
    console.print(f"[bold]Lakeshore demo[/] on {plane!r}")
    workers = start_workers(2)
    try:
        run_id = q.submit(None, envelope=train.envelope(12))
        console.print(f"submitted a training run: [cyan]{run_id}[/]")

        started = time.perf_counter()
        ids = [score.submit(i) for i in range(FAN_OUT)]
        console.print(f"fanned out {FAN_OUT} udf calls in {time.perf_counter() - started:.3f}s")

        console.print(f"[bold]frames of {run_id}[/], as the worker posts them:")
        for frame in q.stream(run_id, timeout=60):
            console.print(f"  step {frame['step']:>2}  loss {frame['loss']}")
        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress:
            task = progress.add_task("collecting results", total=FAN_OUT)
            results = []
            for inv in ids:
                while True:
                    try:
                        results.append(q.result(inv, timeout=1.0))
                        break
                    except TimeoutError:
                        if all(w.poll() is not None for w in workers):
                            raise SystemExit("the workers exited early") from None
                progress.advance(task)
        console.print(f"mean score {sum(results) / len(results):.4f} over {len(results)} results")

        console.print(f"training result: {q.result(run_id)}")
        names = ", ".join(f"{w.name} (pid {w.pid})" for w in plane.workers())
        console.print(f"served by: {names or 'in-process worker loops'}")
        console.print(
            f"queue '{QUEUE}': {q.count('succeeded')} succeeded, {q.count('queued')} queued, "
            f"{q.count('failed')} failed"
        )
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            w.wait(timeout=30)


if __name__ == "__main__":
    main()
