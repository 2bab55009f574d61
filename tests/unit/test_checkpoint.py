"""WAL checkpoints at synchronous=NORMAL run on a thread of the process, not inside a commit
(sdk/plane/checkpoint.py): the commit that crossed SQLite's 1000 pages used to write out and
sync the whole log, several milliseconds in one call of a hundred. And the page size of a new
file, which sets how much log each commit writes."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane.checkpoint import Checkpointer
from dreamlake.lakeshore.plane.sqlite import PAGE_SIZE, SqliteConnector
from tests.support.daemons import wait_until

PAGE = PAGE_SIZE


def _connector(plane: dls.Dispatch) -> SqliteConnector:
    connector = plane.store.connector
    assert isinstance(connector, SqliteConnector)
    return connector


def _checkpointer(plane: dls.Dispatch, every: int) -> Checkpointer:
    """The plane's checkpointer (it runs at NORMAL), now due every `every` commits."""
    checkpointer = _connector(plane).checkpointer
    assert checkpointer is not None
    checkpointer.every = every
    return checkpointer


def _autocheckpoint(connector: SqliteConnector) -> int:
    with connector._lock:
        (pages,) = connector._conn.execute("PRAGMA wal_autocheckpoint").fetchone()
    return int(pages)


def _fill(plane: dls.Dispatch, pages: int) -> None:
    """Commit about `pages` pages of payload, 25 pages a submit."""
    q = dls.SyncQueue("fill", dispatch=plane)
    for _ in range(pages // 25 + 1):
        q.submit(os.urandom(25 * PAGE))


def test_at_normal_no_commit_checkpoints_the_log_itself(tmp_path: Path) -> None:
    # given: a plane at NORMAL whose checkpoint thread never comes due
    with dls.Dispatch(tmp_path / "db.sqlite", durable=False) as plane:
        connector = _connector(plane)
        checkpointer = _checkpointer(plane, 10**9)

        # when: commits write well past SQLite's 1000-page checkpoint mark
        _fill(plane, 1500)

        # then: the log holds all of it (a commit that checkpointed would have restarted it)
        assert _autocheckpoint(connector) == 0
        assert os.path.getsize(f"{tmp_path / 'db.sqlite'}-wal") > 1200 * PAGE
        assert checkpointer.runs == 0


def test_at_normal_the_checkpoint_thread_copies_the_log_back(tmp_path: Path) -> None:
    # given: a plane at NORMAL that checkpoints every 8 commits; its file holds only a header
    # (the schema is still in the log: nothing has checkpointed yet)
    path = tmp_path / "db.sqlite"
    with dls.Dispatch(path, durable=False) as plane:
        checkpointer = _checkpointer(plane, 8)
        before = os.path.getsize(path)

        # when: it commits 16 times
        q = dls.SyncQueue("q", dispatch=plane)
        for i in range(16):
            q.submit(i)

        # then: its thread checkpointed, which copied the log's pages into the file
        wait_until(lambda: checkpointer.runs >= 1, what="a background checkpoint")
        assert before <= PAGE
        assert os.path.getsize(path) > 4 * PAGE


def test_a_new_file_gets_the_small_page_and_an_old_one_keeps_its_own(tmp_path: Path) -> None:
    # A commit writes each page it touched whole: small pages, small log writes and fsyncs.
    made = SqliteConnector(tmp_path / "new.db")
    old = tmp_path / "old.db"
    with sqlite3.connect(old) as conn:  # a file made before: SQLite's default of 4096
        conn.execute("PRAGMA page_size = 4096")
        conn.execute("CREATE TABLE before_lakeshore (x)")
    opened = SqliteConnector(old)
    try:
        assert _page_size(made) == PAGE_SIZE == 1024
        assert _page_size(opened) == 4096
        assert opened.quick_check() is None
    finally:
        made.close()
        opened.close()


def _page_size(connector: SqliteConnector) -> int:
    with connector._lock:
        (size,) = connector._conn.execute("PRAGMA page_size").fetchone()
    return int(size)


def test_at_full_sqlite_keeps_checkpointing_at_commit(tmp_path: Path) -> None:
    # At FULL the log is on disk at every commit already: the checkpoint's cost did not show.
    with dls.Dispatch(tmp_path / "db.sqlite") as plane:
        connector = _connector(plane)

        assert connector.checkpointer is None
        assert _autocheckpoint(connector) == 1000


def test_a_closed_checkpointer_starts_no_thread(tmp_path: Path) -> None:
    checkpointer = Checkpointer(str(tmp_path / "db.sqlite"), every=1)
    checkpointer.close()

    checkpointer.committed(1)

    assert checkpointer._thread is None
    assert checkpointer.runs == 0


def test_close_stops_the_thread(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    with dls.Dispatch(path, durable=False) as plane:
        checkpointer = _checkpointer(plane, 1)
        dls.SyncQueue("q", dispatch=plane).submit(1)
        wait_until(lambda: checkpointer.runs >= 1, what="a background checkpoint")
        thread = checkpointer._thread
        assert thread is not None and thread.is_alive()

    thread.join(10)
    assert not thread.is_alive()


@pytest.mark.parametrize("every", [0, -1])
def test_a_checkpoint_interval_below_one_commit_is_refused(tmp_path: Path, every: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Checkpointer(str(tmp_path / "db.sqlite"), every=every)
