"""Job bodies for the fault tests, imported by reference in the daemons' child processes.

Each returns its parent's pid: the daemon that ran it (a slot's child is spawned by the daemon
and keeps it as parent), so the history checker can tell whose result a row holds.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def work(tag: str, seconds: float = 0.0, marker_dir: str | None = None) -> dict[str, Any]:
    """Touch `marker_dir/tag.<pid>` when it starts (a test can see it run), sleep, report."""
    if marker_dir:
        Path(marker_dir, f"{tag}.{os.getpid()}").write_text(str(os.getppid()))
    if seconds:
        time.sleep(seconds)
    return {"tag": tag, "ppid": os.getppid()}


def busy(seconds: float, marker: str) -> dict[str, Any]:
    """Spin on the CPU for `seconds` without a single blocking call."""
    Path(marker).write_text(str(os.getpid()))
    deadline = time.perf_counter() + seconds
    spins = 0
    while time.perf_counter() < deadline:
        spins += 1
    return {"spins": spins, "ppid": os.getppid()}


class Booby:
    """Unpickling this writes `marker`, wherever it happens: it reduces to `exec` of a line, so
    it needs no import of this module (the server, which must never unpickle, would run it)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        code = f"import os\nwith open({self.marker!r}, 'w') as f:\n    f.write(str(os.getpid()))"
        return (exec, (code,))


# -- poison: jobs that attack the daemon that runs them (test_poison_jobs.py) -------------------


class Unprintable(Exception):
    """An exception whose message cannot even be rendered."""

    def __str__(self) -> str:
        raise RuntimeError("no message for you")


def poison_handler(payload: Any) -> Any:
    """The daemon's --handler for raw payloads: each `op` attacks it in its own way."""
    op = payload.get("op") if isinstance(payload, dict) else None
    if op == "unprintable":
        raise Unprintable()
    if op == "exit":
        raise SystemExit(3)
    if op == "interrupt":
        raise KeyboardInterrupt
    return {"echo": payload, "ppid": os.getppid()}


def bad_frame() -> Any:
    """Yield a frame no codec can carry, then succeed (it must not). A big frame is no poison
    any more: above the inline limit it rides as a Ref (spill.py)."""
    yield object()
    return "unreachable"


def hard_exit(code: int) -> None:
    os._exit(code)


def paced(n: int, pause_s: float) -> Any:
    """Yield 0..n-1, a pause apart (the stream-resume test kills the server meanwhile)."""
    import time

    for i in range(n):
        yield i
        time.sleep(pause_s)
    return n


def checkpointed(steps: int, every: int, log: str, pause_s: float) -> int:
    """Sum i*i for i in 1..steps, a step at a time, checkpointing every `every` steps (issue 35):
    killed anywhere, the next attempt goes on from the last checkpoint. Each step run is a line
    `attempt step` in `log`, so a test can measure the progress a kill cost."""
    import dreamlake.lakeshore as dls

    state = dls.run.last_checkpoint() or {"step": 0, "total": 0}
    with Path(log).open("a") as out:
        while state["step"] < steps:
            if dls.run.preempting.is_set():
                dls.run.checkpoint(state)
                raise dls.Preempted()
            step = state["step"] + 1
            state = {"step": step, "total": state["total"] + step * step}
            out.write(f"{dls.run.attempt} {step}\n")
            out.flush()
            if step % every == 0:
                dls.run.checkpoint(state)
            time.sleep(pause_s)
    return int(state["total"])


def progress_lost(log: str) -> list[int]:
    """Per resume in `log` (written by `checkpointed`): how many steps already run were run
    again, i.e. the furthest step an earlier attempt reached before this one started, less
    the step this one started from."""
    lost = []
    furthest = 0
    seen: set[int] = set()
    for line in Path(log).read_text().splitlines():
        attempt, step = (int(x) for x in line.split())
        if attempt not in seen:
            seen.add(attempt)
            if len(seen) > 1:
                lost.append(max(0, furthest - (step - 1)))
        furthest = max(furthest, step)
    return lost
