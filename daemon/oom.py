"""Telling a job killed by the kernel's OOM killer from any other death (issue 35 item 6).

The OOM killer ends a process with SIGKILL, which is all the daemon sees of it: a child gone
with exit code -9. What tells it apart is a counter the kernel moves when it kills for memory:

- cgroup v2: `oom_kill` in the daemon's cgroup's `memory.events` (it counts the cgroup's
  descendants too, and kills of the global OOM killer inside it);
- cgroup v1: `oom_kill` in the memory controller's `memory.oom_control` (Linux 4.13+);
- everywhere: `oom_kill` in /proc/vmstat (every OOM kill on the box, Linux 4.13+).

A slot takes a reading as its job starts and another when the job's process died by a SIGKILL
the daemon did not send: a counter that moved means the job ran out of host memory (`oom`),
else it `died`. A reading costs about 0.1 ms (vmstat is long), a no-op job on the daemon about
0.25 ms: so the one a job starts with is the last taken if it is under BASELINE_S old (counters
only grow: an older baseline only widens the window by that much), and a fresh read is paid
once a second at most, and at a SIGKILL. The counters are the box's or the cgroup's,
not the process's, so a kill of another process for memory in the same window also reads as
one; a SIGKILL from elsewhere with no OOM kill anywhere reads as `died`, never as `oom`.

`LAKESHORE_OOM_COUNTERS` (a test seam, not a setting) names files to read instead, each holding
one integer: the e2e tests move one by hand beside a child that kills itself.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from dreamlake.lakeshore.work.slot import OOM_ERROR, Outcome

#: A reading: the value of each counter found, by where it was read.
Reading = Mapping[str, int]

SEAM_ENV = "LAKESHORE_OOM_COUNTERS"
#: How old a reading a job may start from (see the module).
BASELINE_S = 1.0


class OomCounters:
    """The OOM-kill counters this box offers, found once; read as often as jobs start."""

    def __init__(
        self,
        sources: Sequence[tuple[str, Path, str | None]] | None = None,
        *,
        baseline_s: float = BASELINE_S,
    ) -> None:
        """`sources`: (name, file, field) per counter; `field` None: the file is one integer.
        None: found from /proc and the daemon's cgroup (or the test seam)."""
        self.sources = list(find_sources() if sources is None else sources)
        self.baseline_s = baseline_s
        self._last: tuple[float, dict[str, int]] | None = None

    def baseline(self) -> dict[str, int]:
        """A reading to start a job from: the last one if it is fresh enough, else a new one.
        Called from every slot's thread: the cached pair is swapped whole, never mutated."""
        now = time.monotonic()
        last = self._last
        if last is not None and now - last[0] < self.baseline_s:
            return last[1]
        return self.read()

    def read(self) -> dict[str, int]:
        """Each counter that could be read now (one that cannot is left out). It is the next
        baseline too: a job that starts after an OOM kill never counts that one as its own."""
        out: dict[str, int] = {}
        for name, path, field in self.sources:
            value = read_counter(path, field)
            if value is not None:
                out[name] = value
        self._last = (time.monotonic(), out)
        return out


def read_counter(path: Path, field: str | None) -> int | None:
    """The integer in `path`, or in its line `field N`; None when absent or unreadable."""
    try:
        text = path.read_text()
    except OSError:
        return None
    try:
        if field is None:
            return int(text.strip())
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == field:
                return int(value)
    except ValueError:
        return None
    return None


def moved(before: Reading, after: Reading) -> list[str]:
    """The counters read both times whose value went up."""
    return [name for name, value in after.items() if name in before and value > before[name]]


def killed_for_memory(exitcode: int | None, before: Reading, after: Reading) -> list[str]:
    """Why a child's death reads as out of host memory: the counters that moved while it ran
    (empty: it was not). Only a SIGKILL can be the OOM killer's."""
    if exitcode != -signal.SIGKILL:
        return []
    return moved(before, after)


def death(
    exitcode: int | None,
    counters: OomCounters | None,
    before: Reading,
    describe: Callable[[int | None], str],
) -> Outcome:
    """How a job's process ended with no word from it: killed by the kernel's OOM killer (a
    SIGKILL while a counter moved since `before`: `oom`), or otherwise (`died`); `describe`
    words an exit code."""
    if counters is not None and exitcode == -signal.SIGKILL:
        moved_in = killed_for_memory(exitcode, before, counters.read())
        if moved_in:
            return Outcome(
                "died",
                error=f"{OOM_ERROR}: the kernel's OOM killer ended the job's process "
                f"(SIGKILL while oom_kill went up in {', '.join(moved_in)})",
                cause="oom",
            )
        if counters.sources:
            return Outcome(
                "died",
                error="the job's process died: killed by SIGKILL (not by the OOM killer: "
                "no OOM kill was counted)",
                cause="died",
            )
    return Outcome("died", error=f"the job's process died: {describe(exitcode)}", cause="died")


def find_sources(
    proc: Path = Path("/proc"), environ: Mapping[str, str] = os.environ
) -> list[tuple[str, Path, str | None]]:
    """The counters to read: the seam's files, else the daemon's cgroup's and /proc/vmstat."""
    seam = environ.get(SEAM_ENV)
    if seam:
        return [(p, Path(p), None) for p in seam.split(os.pathsep) if p]
    found: list[tuple[str, Path, str | None]] = []
    for name, path, field in _cgroup_sources(proc):
        if read_counter(path, field) is not None:
            found.append((name, path, field))
    vmstat = proc / "vmstat"
    if read_counter(vmstat, "oom_kill") is not None:
        found.append(("vmstat", vmstat, "oom_kill"))
    return found


def _cgroup_sources(proc: Path) -> list[tuple[str, Path, str | None]]:
    """The memory cgroup of this process: v2's memory.events, v1's memory.oom_control."""
    try:
        groups = (proc / "self" / "cgroup").read_text().splitlines()
        mounts = (proc / "self" / "mountinfo").read_text().splitlines()
    except OSError:
        return []
    out: list[tuple[str, Path, str | None]] = []
    for line in groups:
        hierarchy, _, rest = line.partition(":")
        controllers, _, group = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            folder = _cgroup_folder(mounts, "cgroup2", None, group)
            if folder is not None:
                out.append(("cgroup", folder / "memory.events", "oom_kill"))
        elif "memory" in controllers.split(","):
            folder = _cgroup_folder(mounts, "cgroup", "memory", group)
            if folder is not None:
                out.append(("cgroup", folder / "memory.oom_control", "oom_kill"))
    return out


def _cgroup_folder(
    mounts: Sequence[str], fstype: str, option: str | None, group: str
) -> Path | None:
    """The folder of cgroup `group` where its hierarchy is mounted. mountinfo's lines read
    `id parent dev root mountpoint ... - fstype source options`; `root` is the part of the
    hierarchy the mount shows (a container's own cgroup, often), which `group` starts with."""
    for line in mounts:
        head, sep, tail = line.partition(" - ")
        if not sep:
            continue
        fields, tail_fields = head.split(), tail.split()
        if len(fields) < 5 or len(tail_fields) < 3 or tail_fields[0] != fstype:
            continue
        if option is not None and option not in tail_fields[2].split(","):
            continue
        root, inside = fields[3].rstrip("/"), group
        if root and (group == root or group.startswith(root + "/")):
            inside = group[len(root) :]
        return Path(fields[4]) / inside.lstrip("/")
    return None
