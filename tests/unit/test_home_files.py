"""What Lakeshore leaves on disk is its owner's only, and a token file is never overwritten."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane.auth import bootstrap
from dreamlake.lakeshore.plane.dispatch import open_store
from dreamlake.lakeshore.storage import LocalStorage


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_home_and_database_are_private(tmp_path: Path) -> None:
    home = tmp_path / "home"

    with dls.Dispatch(home / "lakeshore.db") as plane:
        plane.submit("q", [dls.types.SubmitRequest(payload=dls.encode(1))])

    assert mode(home) == 0o700
    assert mode(home / "lakeshore.db") == 0o600
    assert all(mode(p) == 0o600 for p in home.glob("lakeshore.db-*"))  # -wal, -shm


def test_stored_objects_and_their_folders_are_private(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "storage")

    storage.write("runs/r1/out.bin", b"secret")

    assert mode(tmp_path / "storage" / "runs" / "r1") == 0o700
    assert mode(tmp_path / "storage" / "runs" / "r1" / "out.bin") == 0o600


def test_a_second_store_under_one_home_never_overwrites_the_first_token(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first, second = open_store(tmp_path / "a.db"), open_store(tmp_path / "b.db")
    try:
        made_a = bootstrap(first, home)
        made_b = bootstrap(second, home)
        assert made_a is not None and made_b is not None
        (token_a, path_a), (token_b, path_b) = made_a, made_b

        assert (path_a.name, path_b.name) == ("token", "token.2")
        assert path_a.read_text().strip() == token_a  # still the first store's token
        assert path_b.read_text().strip() == token_b
        assert first.token_scope(token_a).admin and second.token_scope(token_b).admin
        assert mode(path_a) == mode(path_b) == 0o600
        assert bootstrap(first, home) is None  # a store that has tokens writes nothing
    finally:
        first.close()
        second.close()


def test_the_home_token_is_sent_to_loopback_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKESHORE_HOME", str(tmp_path))
    monkeypatch.delenv("LAKESHORE_TOKEN", raising=False)
    (tmp_path / "token").write_text("lks_home-admin\n")

    def auth(url: str) -> str | None:
        with dls.HttpDispatch(url) as plane:  # constructing connects to nothing
            return plane._client.headers.get("authorization")

    assert auth("http://127.0.0.1:8765") == "Bearer lks_home-admin"
    assert auth("http://localhost:8765") == "Bearer lks_home-admin"
    assert auth("http://[::1]:8765") == "Bearer lks_home-admin"
    assert auth("http://control-plane.example:8765") is None
    assert auth("http://127.0.0.1.example:8765") is None
    monkeypatch.setenv("LAKESHORE_TOKEN", "lks_explicit")
    assert auth("http://control-plane.example:8765") == "Bearer lks_explicit"
