"""Leader election on one box: an flock beside the SQLite file, released with its holder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.plane.leader import FileLeader, leader_for


def test_second_contender_leads_only_after_the_first_closes(tmp_path: Path) -> None:
    db = tmp_path / "lakeshore.db"
    with FileLeader(db, "controller") as first:
        second = FileLeader(db, "controller")
        assert first.is_leader
        assert not second.is_leader
        assert not second.try_acquire()

    assert second.try_acquire()
    assert second.is_leader
    second.close()
    assert not second.is_leader


def test_different_keys_do_not_contend(tmp_path: Path) -> None:
    db = tmp_path / "lakeshore.db"
    with FileLeader(db, "controller") as a, FileLeader(db, "janitor") as b:
        assert a.is_leader and b.is_leader


def test_a_leader_in_another_process_holds_until_it_exits(tmp_path: Path) -> None:
    db = tmp_path / "lakeshore.db"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from dreamlake.lakeshore.plane.leader import FileLeader\n"
            f"leader = FileLeader({str(db)!r}, 'controller')\n"
            "print(leader.is_leader, flush=True)\n"
            "sys.stdin.read()\n",  # hold until the test closes our stdin
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "True"
        contender = FileLeader(db, "controller")
        assert not contender.is_leader

        holder.stdin.close()
        holder.wait(timeout=10)

        assert contender.try_acquire()
        contender.close()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()


def test_leader_for_a_path_is_a_file_lock(tmp_path: Path) -> None:
    leader = leader_for(tmp_path / "lakeshore.db", "controller")
    try:
        assert isinstance(leader, FileLeader)
        assert leader.is_leader
    finally:
        leader.close()


@pytest.mark.parametrize("key", ["", "../escape", "a/b", "with space"])
def test_keys_that_are_not_plain_file_names_are_refused(tmp_path: Path, key: str) -> None:
    with pytest.raises(InvalidArgument):
        FileLeader(tmp_path / "lakeshore.db", key)


def test_an_in_memory_plane_has_no_leader_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument):
        leader_for(":memory:", "controller")
