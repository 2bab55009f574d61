"""What Lakeshore leaves on disk is its owner's only, and a token file is never overwritten."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane.auth import bootstrap
from dreamlake.lakeshore.plane.dispatch import open_store
from dreamlake.lakeshore.plane.home_token import forget_listener, record_listener
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


@pytest.fixture
def home_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home holding an admin token, and no token or proxy in the environment."""
    monkeypatch.setenv("LAKESHORE_HOME", str(tmp_path))
    for name in ("LAKESHORE_TOKEN", "http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "token").write_text("lks_home-admin\n")
    return tmp_path


def auth(url: str) -> str | None:
    """The Authorization header a client of `url` would send (constructing connects nowhere)."""
    with dls.HttpDispatch(url) as plane:
        return plane._client.headers.get("authorization")


ADMIN = "Bearer lks_home-admin"


def test_without_a_record_of_its_server_the_home_token_goes_nowhere(home_token: Path) -> None:
    assert auth("http://127.0.0.1:8765") is None
    assert auth("http://localhost:8765") is None


def test_the_home_token_goes_to_the_sockets_its_server_bound_and_nowhere_else(
    home_token: Path,
) -> None:
    record_listener(home_token, "lks_home-admin", "http", [("127.0.0.1", 8765), ("::1", 8765)])

    assert auth("http://127.0.0.1:8765") == ADMIN
    assert auth("http://[::1]:8765") == ADMIN
    assert auth("http://localhost:8765") == ADMIN  # every address it names is the server's
    assert auth("http://127.0.0.1:8765,http://[::1]:8765") == ADMIN
    # another port of this box is another server, whoever runs it
    assert auth("http://127.0.0.1:8766") is None
    assert auth("http://127.0.0.1:8765,http://127.0.0.1:8766") is None  # a replica elsewhere
    assert auth("http://127.0.0.2:8765") is None  # bound to 127.0.0.1: .2 is anyone's
    assert auth("https://127.0.0.1:8765") is None
    assert auth("http://control-plane.example:8765") is None
    assert auth("http://127.0.0.1.example:8765") is None


def test_a_server_bound_to_one_family_owns_no_port_of_the_other(home_token: Path) -> None:
    record_listener(home_token, "lks_home-admin", "http", [("127.0.0.1", 8765)])

    assert auth("http://127.0.0.1:8765") == ADMIN
    assert auth("http://[::1]:8765") is None  # another user may hold [::1]:8765


def test_a_wildcard_covers_the_loopback_addresses_of_its_family(home_token: Path) -> None:
    record_listener(home_token, "lks_home-admin", "https", [("0.0.0.0", 443)])

    assert auth("https://127.0.0.1") == ADMIN
    assert auth("https://127.0.0.9:443") == ADMIN
    assert auth("https://[::1]") is None
    assert auth("https://10.1.2.3") is None  # this box's, perhaps, or another's: never


def test_a_record_of_another_token_or_a_proxy_in_between_sends_nothing(
    home_token: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_listener(home_token, "lks_replaced-since", "http", [("127.0.0.1", 8765)])
    assert auth("http://127.0.0.1:8765") is None

    record_listener(home_token, "lks_home-admin", "http", [("127.0.0.1", 8765)])
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:3128")
    monkeypatch.setenv("no_proxy", "")
    assert auth("http://127.0.0.1:8765") is None  # the proxy would read the header


def test_an_explicit_token_goes_where_it_is_sent(
    home_token: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKESHORE_TOKEN", "lks_explicit")
    assert auth("http://control-plane.example:8765") == "Bearer lks_explicit"


def test_a_stopping_server_removes_its_record_and_no_other(home_token: Path) -> None:
    path = record_listener(home_token, "lks_home-admin", "http", [("127.0.0.1", 8765)])
    assert mode(path) == 0o600
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "pid": record["pid"] + 1}))  # another server's now

    forget_listener(home_token)
    assert path.exists()

    record_listener(home_token, "lks_home-admin", "http", [("127.0.0.1", 8765)])
    forget_listener(home_token)
    assert not path.exists()
