"""Retention gives space back (issue 17, item 4): a SQLite plane file is made with
auto_vacuum = INCREMENTAL, and each trim batch hands the pages it freed back to the filesystem,
so a file that held a long history shrinks once the history is trimmed, not only stops growing.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from dreamlake.lakeshore.plane.dispatch import Dispatch
from dreamlake.lakeshore.types import Ack, SubmitRequest

JOBS = 2000


def _pages(path: Path) -> tuple[int, int, int]:
    """(auto_vacuum mode, page_count, freelist_count) as a separate reader sees the file."""
    with sqlite3.connect(path) as conn:
        return tuple(  # type: ignore[return-value]
            conn.execute(f"PRAGMA {name}").fetchone()[0]
            for name in ("auto_vacuum", "page_count", "freelist_count")
        )


def test_trim_gives_the_freed_pages_back(tmp_path: Path) -> None:
    # given: a new plane file holding 2000 ended jobs with 2 KiB payloads
    path = tmp_path / "plane.db"
    plane = Dispatch(str(path))
    try:
        plane.submit("history", [SubmitRequest(payload=b"x" * 2048) for _ in range(JOBS)])
        while claimed := plane.claim_many(["history"], worker="w", limit=500):
            plane.ack_many([Ack(job.id, job.lease, b"done") for job in claimed])
        mode, full, _ = _pages(path)

        # when: retention trims every ended row, in its batches
        trimmed = plane.trim_retention(invocations_older_than_s=0)
        _, after, free = _pages(path)
    finally:
        plane.close()

    # then: the file is incremental, the rows went, and their pages left the file
    assert mode == 2  # INCREMENTAL
    assert trimmed.invocations == JOBS
    assert free < 64, f"{free} free pages left inside the file"
    assert after < full // 2, (full, after)
