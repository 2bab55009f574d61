"""Hangs of a gang (issue 47): a multi-node job whose parts all stop moving, found and dumped.

A distributed job that wedges (a rank stuck in a collective its peer never joins, a deadlock in
a data loader) shows no error: every part stays running until NCCL's ten minutes or gloo's
thirty, or for ever outside a collective. With `hang_timeout_s=T`, each part's slot keeps the
time its child last moved (`Progress`: a frame, a checkpoint, `dls.run.progress()`), tells the
plane at most every few seconds (`Plane.gang_progress`, so the gang's `progress_at` is the
newest move of any part), and once its own child has been still for T asks the plane: if no
part has moved for T either, the gang hangs. That part's daemon says so (`gang_progress(...,
hung=True)`: every other part's watcher wakes and dumps its child's Python stacks into that
part's output), dumps its own, and after PEERS_DUMP_S fails the attempt (retried as a whole,
from the last checkpoint); the others stop with the gang.

The stacks come from `faulthandler`, which the child registers on SIGUSR1 (`register`): it
writes every thread's stack from the signal handler itself, so a child blocked in C (an
all-reduce, a lock) dumps too. A stopped child (SIGSTOP) is continued first.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Final

#: Set in a watched part's child (its value: hang_timeout_s): it registers the dump handler.
WATCHED: Final = "LAKESHORE_HANG_TIMEOUT_S"
#: How often a moving part tells the plane so, at most (a fraction of T, never more often).
REPORT_EVERY_S: Final = 5.0
#: The most of one child's stacks kept in its output.
STACKS_MAX_BYTES: Final = 64 * 1024
#: How long the part that found a hang lets the others dump their stacks before it fails the
#: attempt (their posts are refused once it has ended).
PEERS_DUMP_S: Final = 3.0
#: How long a dump may take to appear.
DUMP_WAIT_S: Final = 3.0


def stacks_path(pid: int) -> Path:
    """Where the child `pid` writes its stacks when asked (the child and its daemon agree)."""
    return Path(tempfile.gettempdir()) / f"lakeshore-stacks-{pid}.txt"


def register() -> None:
    """In the child: dump every thread's stack to `stacks_path` on SIGUSR1."""
    import faulthandler

    with contextlib.suppress(OSError, RuntimeError, ValueError):
        out = open(stacks_path(os.getpid()), "w")  # noqa: SIM115 - open for the child's life
        faulthandler.register(signal.SIGUSR1, file=out, all_threads=True, chain=False)


def dump_stacks(pid: int | None) -> str:
    """The Python stacks of the child `pid`, as faulthandler writes them; '' if it could not
    (gone, or it registered no handler)."""
    if pid is None:
        return ""
    path = stacks_path(pid)
    try:
        before = path.stat().st_size
        os.kill(pid, signal.SIGCONT)  # a stopped process runs no handler
        os.kill(pid, signal.SIGUSR1)
    except OSError:
        return ""
    deadline = time.monotonic() + DUMP_WAIT_S
    size = before
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = path.stat().st_size if path.exists() else 0
        if now > before and now == size:
            break  # written, and no longer growing
        size = now
    with contextlib.suppress(OSError), open(path, "rb") as f:
        f.seek(before)
        return f.read(STACKS_MAX_BYTES).decode("utf-8", "replace")
    return ""


def stacks_frame(rank: int, why: str, stacks: str) -> bytes:
    """The output line (a frame's value) that carries one part's stacks at a hang."""
    from dreamlake.lakeshore import spill

    text = f"lakeshore: rank {rank} {why}\n--- Python stacks of rank {rank} ---\n"
    return spill.dumps(text + (stacks or "(none: its process did not answer)\n"))


def forget(pid: int | None) -> None:
    """Remove a retired child's stacks file."""
    if pid is not None:
        with contextlib.suppress(OSError):
            stacks_path(pid).unlink()


class Progress:
    """When one part's child last moved, and when the plane was last told.

    The clock starts at the child's first move, not at its start: a job's first seconds (torch
    imported, the process group formed) are not progress it could report, and a hang is a job
    that *stopped* moving. A gang none of whose parts ever moves is not found by this."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.moved_at: float | None = None
        self._reported_at = -math.inf
        self._every_s = min(REPORT_EVERY_S, timeout_s / 4)

    def moved(self) -> bool:
        """The child moved; True when the plane should be told now."""
        self.moved_at = now = time.monotonic()
        if now - self._reported_at >= self._every_s:
            self._reported_at = now
            return True
        return False

    def still_until(self) -> float:
        """When, by this part alone, the job hangs (monotonic seconds; inf before a move)."""
        return math.inf if self.moved_at is None else self.moved_at + self.timeout_s

    def rearm(self, gang_still_s: float) -> None:
        """Another part moved `gang_still_s` ago: no hang before T after that."""
        self.moved_at = max(self.moved_at or -math.inf, time.monotonic() - gang_still_s)
