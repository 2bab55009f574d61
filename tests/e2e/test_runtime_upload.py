"""What a submit sends of a workdir (issue 46): only what ships, and only what the plane lacks."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane import Dispatch


def _blobs(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM runtime_blobs").fetchone()[0])


def _shipped_paths(plane: Dispatch, inv_id: str) -> set[str]:
    digest = plane.invocation(inv_id).runtime["bundle"]  # type: ignore[index]
    return {e["path"] for e in plane.runtime_manifest(digest)["entries"]}


def test_a_big_git_folder_and_ignored_data_stay_home_but_a_negated_file_ships(
    tmp_path: Path,
) -> None:
    work = tmp_path / "proj"
    (work / ".git" / "objects").mkdir(parents=True)
    with open(work / ".git" / "objects" / "pack", "wb") as f:
        f.truncate(300 << 20)  # 300 MB, sparse: never read, since .git is never entered
    (work / "data").mkdir()
    (work / "data" / "shard-0.bin").write_bytes(b"\0" * 4096)
    (work / "data" / "keep.txt").write_text("kept\n")
    (work / ".gitignore").write_text("data/*\n!data/keep.txt\n")
    (work / "train.py").write_text("print('train')\n")
    with Dispatch(str(tmp_path / "plane.db")) as plane:
        q = dls.SyncQueue("up", dispatch=plane)
        job = q.submit({"go": 1}, runtime=dls.Runtime(workdir=work))
        shipped = _shipped_paths(plane, job)
    assert shipped == {"workdir/.gitignore", "workdir/train.py", "workdir/data/keep.txt"}


def test_an_edit_of_one_of_2000_files_uploads_exactly_one_blob(tmp_path: Path) -> None:
    work = tmp_path / "many"
    for i in range(2000):
        folder = work / f"pkg{i // 100}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"m{i}.py").write_text(f"VALUE = {i}\n")
    db = tmp_path / "plane.db"
    with Dispatch(str(db)) as plane:
        q = dls.SyncQueue("up", dispatch=plane)
        runtime = dls.Runtime(workdir=work)
        first = q.submit({"n": 1}, runtime=runtime)
        assert _blobs(db) == 2000
        again = q.submit({"n": 2}, runtime=runtime)  # the same tree: nothing sent
        assert _blobs(db) == 2000
        edited = work / "pkg7" / "m742.py"
        edited.write_text("VALUE = 'edited'\n")
        os.utime(edited)
        third = q.submit({"n": 3}, runtime=runtime)
        assert _blobs(db) == 2001
        digests = [plane.invocation(i).runtime["bundle"] for i in (first, again, third)]  # type: ignore[index]
    assert digests[0] == digests[1] != digests[2]
