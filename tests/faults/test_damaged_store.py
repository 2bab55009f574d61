"""A damaged or foreign SQLite file: the server refuses to start, saying which file and what to
do; the CLI prints one line; a damage found while serving is a 503 that /readyz repeats."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import StoreDamaged
from dreamlake.lakeshore.plane.dispatch import open_store
from tests.support.server import LAUNCH, free_port, server_env

pytestmark = pytest.mark.slow


def lakeshore(home: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", LAUNCH, *args],
        env=server_env(home),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def damaged_copy(tmp_path: Path) -> Path:
    """A real plane's file with its last page overwritten (as a torn write would leave it)."""
    path = tmp_path / "plane.db"
    with dls.Dispatch(path) as plane:
        plane.submit("q", [dls.types.SubmitRequest(payload=b"x" * 2000) for _ in range(400)])
    store = open_store(path)
    store.close()  # the last connection to close checkpoints the WAL into the file
    data = bytearray(path.read_bytes())
    data[-4096:] = b"\xde\xad\xbe\xef" * 1024
    path.write_bytes(bytes(data))
    for extra in path.parent.glob("plane.db-*"):
        extra.unlink()
    return path


def test_a_file_that_is_not_a_database_is_one_clear_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "lakeshore.db").write_bytes(b"this is not a database at all\n" * 200)

    for args in (["queues", "ls"], ["server", "--port", str(free_port())]):
        out = lakeshore(home, *args)

        assert out.returncode != 0
        assert "Traceback" not in out.stderr, out.stderr
        assert str(home / "lakeshore.db") in out.stderr and "recover" in out.stderr


def test_the_server_refuses_a_damaged_file_at_start(tmp_path: Path) -> None:
    path = damaged_copy(tmp_path)

    out = lakeshore(tmp_path / "home", "server", "--port", str(free_port()), "--store", str(path))

    assert out.returncode != 0
    assert "Traceback" not in out.stderr, out.stderr
    assert f"the database {path} is damaged" in out.stderr and ".recover" in out.stderr


def test_damage_found_while_serving_is_a_named_error_not_an_internal_one(tmp_path: Path) -> None:
    path = damaged_copy(tmp_path)
    store = open_store(path)
    try:
        assert store.integrity_problem() is None  # not known yet: nobody has looked
        with pytest.raises(StoreDamaged, match=str(path)):
            for _ in range(3):
                store.invocations("default", limit=1000)
                store.count("default", "q")
                store.trim_retention(invocations_older_than_s=0.0)
        assert str(path) in (store.integrity_problem() or "")  # what /readyz reports
    finally:
        store.close()


def test_a_file_past_the_full_check_size_gets_its_header_and_schema_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full quick_check reads every page (minutes at 10M jobs): past the size limit, start-up
    checks what opening needs, and damage deeper in is found where a statement meets it."""
    from dreamlake.lakeshore.plane import sqlite

    monkeypatch.setattr(sqlite, "FULL_CHECK_MAX_BYTES", 0)
    sound = tmp_path / "sound.db"
    with dls.Dispatch(str(sound)) as plane:
        dls.SyncQueue("q", dispatch=plane).submit_many(list(range(100)))
    deep = damaged_copy(tmp_path)  # pages past the schema overwritten

    for path, found in ((sound, False), (deep, False)):
        store = open_store(path)
        try:
            assert (store.integrity_problem(check=True) is not None) == found
        finally:
            store.close()
    header = tmp_path / "header.db"
    header.write_bytes(b"\0" * 100 + sound.read_bytes()[100:])
    with pytest.raises(StoreDamaged, match=r"header\.db is damaged"):
        open_store(header)  # a damaged header or schema is refused on opening
