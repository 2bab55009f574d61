"""Telling an OOM kill from another death (daemon/oom.py): where the counters are found, and the
classification from recorded counters. The OOM killer itself is not triggered here: on a shared
box it may pick any process; tests/e2e/test_daemon_causes.py runs real children through the
daemon instead (a MemoryError under RLIMIT_AS, and a SIGKILL beside the counter seam)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from dreamlake.lakeshore.daemon.oom import (
    SEAM_ENV,
    OomCounters,
    death,
    find_sources,
    killed_for_memory,
    read_counter,
)

V1_MOUNTS = (
    "30 25 0:27 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "31 25 0:28 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
)


def _proc(tmp_path: Path, cgroup: str, mountinfo: str, oom_kill: int | None = 3) -> Path:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(cgroup)
    (proc / "self" / "mountinfo").write_text(mountinfo)
    vmstat = "nr_free_pages 100\n" + (f"oom_kill {oom_kill}\n" if oom_kill is not None else "")
    (proc / "vmstat").write_text(vmstat + "pgfault 7\n")
    return proc


def test_cgroup_v2_events_of_the_daemons_own_group_and_vmstat(tmp_path: Path) -> None:
    root = tmp_path / "cg2"
    events = root / "system.slice" / "lakeshore-daemon@gpu.service" / "memory.events"
    events.parent.mkdir(parents=True)
    events.write_text("low 0\nhigh 0\nmax 4\noom 2\noom_kill 2\n")
    proc = _proc(
        tmp_path,
        "0::/system.slice/lakeshore-daemon@gpu.service\n",
        f"40 1 0:30 / {root} rw - cgroup2 cgroup2 rw,nsdelegate\n",
    )

    sources = find_sources(proc, environ={})

    assert [(n, p) for n, p, _ in sources] == [("cgroup", events), ("vmstat", proc / "vmstat")]
    assert OomCounters(sources).read() == {"cgroup": 2, "vmstat": 3}


def test_cgroup_v1_oom_control_under_a_mount_of_the_containers_own_group(
    tmp_path: Path,
) -> None:
    # A container sees its own cgroup as the mount's root: /docker/abc is the folder itself.
    root = tmp_path / "memory"
    control = root / "job" / "memory.oom_control"
    control.parent.mkdir(parents=True)
    control.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 5\n")
    mounts = f"30 25 0:27 /docker/abc {root} rw - cgroup cgroup rw,memory\n"
    proc = _proc(tmp_path, "4:memory:/docker/abc/job\n1:pids:/\n", mounts)

    assert OomCounters(find_sources(proc, environ={})).read() == {"cgroup": 5, "vmstat": 3}


def test_only_the_counters_that_can_be_read_are_kept(tmp_path: Path) -> None:
    # No memory.oom_control (a kernel before 4.13 has no oom_kill line either): vmstat alone.
    proc = _proc(tmp_path, "4:memory:/gone\n", V1_MOUNTS.replace("/sys/fs", str(tmp_path)))
    assert [n for n, _, _ in find_sources(proc, environ={})] == ["vmstat"]
    bare = _proc(tmp_path / "old", "0::/\n", "", oom_kill=None)
    assert find_sources(bare, environ={}) == []
    assert OomCounters([]).read() == {}


def test_the_seam_names_files_of_one_integer(tmp_path: Path) -> None:
    counter = tmp_path / "oom"
    counter.write_text("7\n")
    sources = find_sources(tmp_path, environ={SEAM_ENV: str(counter)})
    assert OomCounters(sources).read() == {str(counter): 7}
    counter.write_text("not a number")
    assert read_counter(counter, None) is None


KILL = -signal.SIGKILL


@pytest.mark.parametrize(
    ("exitcode", "before", "after", "expected"),
    [
        (KILL, {"cgroup": 1, "vmstat": 4}, {"cgroup": 2, "vmstat": 5}, ["cgroup", "vmstat"]),
        (KILL, {"vmstat": 4}, {"vmstat": 5}, ["vmstat"]),
        (KILL, {"cgroup": 1, "vmstat": 4}, {"cgroup": 1, "vmstat": 4}, []),  # kill -9 by hand
        (-signal.SIGSEGV, {"vmstat": 4}, {"vmstat": 5}, []),  # a crash while another OOMs
        (1, {"vmstat": 4}, {"vmstat": 5}, []),
        (KILL, {}, {"vmstat": 5}, []),  # no baseline: never guessed
        (KILL, {"vmstat": 4}, {}, []),  # unreadable at the death
    ],
)
def test_a_sigkill_with_a_counter_moved_is_out_of_memory_and_nothing_else_is(
    exitcode: int, before: dict[str, int], after: dict[str, int], expected: list[str]
) -> None:
    assert killed_for_memory(exitcode, before, after) == expected


def test_a_baseline_is_reused_while_fresh(tmp_path: Path) -> None:
    counter = tmp_path / "oom"
    counter.write_text("1")
    counters = OomCounters([("seam", counter, None)], baseline_s=3600)
    first = counters.baseline()
    counter.write_text("2")
    assert counters.baseline() is first  # not read again while fresh
    assert counters.read() == {"seam": 2}
    assert counters.baseline() == {"seam": 2}  # a read (at a death) is the next baseline
    assert OomCounters([("seam", counter, None)], baseline_s=0).baseline() == {"seam": 2}


def test_a_death_is_worded_by_what_the_counters_say(tmp_path: Path) -> None:
    counter = tmp_path / "oom"
    counter.write_text("4")
    counters = OomCounters([("vmstat", counter, None)])
    before = counters.read()

    def words(code: int | None) -> str:
        return f"exit {code}"

    assert death(KILL, counters, before, words).cause == "died"  # nothing moved: not the OOM killer
    counter.write_text("5")
    oom = death(KILL, counters, before, words)
    assert (oom.kind, oom.cause) == ("died", "oom")
    assert oom.error.startswith("ran out of host memory: the kernel's OOM killer")
    # No counters on this box (or another signal): the exit code's words, never a guess.
    assert death(KILL, OomCounters([]), {}, words).error == "the job's process died: exit -9"
    assert death(-signal.SIGSEGV, counters, before, words).cause == "died"
