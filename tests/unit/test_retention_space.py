"""Retention gives space back (issue 17, item 4): a SQLite plane file is made with
auto_vacuum = INCREMENTAL, and each trim batch hands the pages it freed back to the filesystem,
so a file that held a long history shrinks once the history is trimmed, not only stops growing;
and on SQLite a trim paces its batches so that claims get the write lock between them.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from dreamlake.lakeshore.plane.dispatch import Dispatch
from dreamlake.lakeshore.plane.retention import BATCH, BATCH_MIN, BATCH_TARGET_S, RECLAIM_EVERY_S
from dreamlake.lakeshore.plane.store import retention as store_retention
from dreamlake.lakeshore.types import Ack, SubmitRequest
from tests.support import claiming

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
        while claimed := claiming.claim_many(plane, ["history"], worker="w", limit=500):
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


def test_the_documented_conversion_gives_an_old_file_the_new_layout(tmp_path: Path) -> None:
    # given: a plane file of the old layout (4096-byte pages, no auto_vacuum) holding a job
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA page_size = 4096")
        conn.execute("PRAGMA auto_vacuum = NONE")
        conn.execute("CREATE TABLE placeholder (x)")  # fixes the layout before the plane's tables
    plane = Dispatch(str(path))
    try:
        (job,) = plane.submit("kept", [SubmitRequest(payload=b"x" * 2048)])
    finally:
        plane.close()

    # when: the SQL that docs/storage.md gives for it runs, offline
    doc = (Path(__file__).parents[2] / "docs" / "storage.md").read_text()
    (command,) = [line for line in doc.splitlines() if line.startswith("sqlite3 ")]
    sql = command.split("'")[1]
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(sql)
    layout = [conn.execute(f"PRAGMA {name}").fetchone()[0] for name in _LAYOUT]
    conn.close()

    # then: the file has the layout a new one gets, and the plane reads its job back
    assert layout == [1024, 2, "wal"]
    plane = Dispatch(str(path))
    try:
        assert plane.invocation(job).state == "queued"
    finally:
        plane.close()


_LAYOUT = ("page_size", "auto_vacuum", "journal_mode")


# -- pacing: on SQLite a trim leaves the write lock free half the time --------------------------


class Clock:
    """perf_counter and sleep for the retention module: time moves only when told."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def _paced(monkeypatch: pytest.MonkeyPatch, *, single_writer: bool) -> tuple[Any, Clock]:
    clock = Clock()
    monkeypatch.setattr(store_retention, "time", clock)
    return store_retention._Pace(BATCH, single_writer=single_writer), clock


def test_a_sqlite_trim_sizes_its_batches_by_time_and_pauses_as_long(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pace, clock = _paced(monkeypatch, single_writer=True)
    assert pace.rows < BATCH  # a first batch on a deep table must not hold the lock for long

    def batch(seconds: float, reclaim_s: float = 0.0) -> None:
        pace.start()
        clock.now += seconds
        pace.held(freed=True)
        clock.now += reclaim_s
        pace.pause()

    first = pace.rows
    batch(4 * BATCH_TARGET_S, reclaim_s=BATCH_TARGET_S)
    assert pace.rows == max(BATCH_MIN, first // 4)  # slow: smaller batches
    assert clock.slept == [pytest.approx(5 * BATCH_TARGET_S)]  # the batch and its reclaim
    for _ in range(20):
        batch(BATCH_TARGET_S / 10)
    assert pace.rows == BATCH  # quick: up to the caller's batch, no further
    for _ in range(20):
        batch(1.0)
    assert pace.rows == BATCH_MIN


def test_a_postgres_trim_keeps_its_batch_and_never_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    pace, clock = _paced(monkeypatch, single_writer=False)
    pace.start()
    clock.now += 1.0
    pace.held(freed=True)
    pace.pause()

    assert pace.rows == BATCH and clock.slept == []


def test_space_is_given_back_after_the_last_batch_and_at_most_every_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pace, clock = _paced(monkeypatch, single_writer=True)
    pace.held(freed=True)
    assert not pace.reclaim_now(last=False)  # too soon after the start
    clock.now += RECLAIM_EVERY_S
    assert pace.reclaim_now(last=False)
    assert not pace.reclaim_now(last=True)  # nothing freed since
    pace.held(freed=True)
    assert pace.reclaim_now(last=True)  # the last batch always gives back what it freed
