"""The process-default plane: resolved on first use from the environment, never at import."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import DispatchError, InvalidArgument
from dreamlake.lakeshore.plane import default_plane, reset_default_plane


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("LAKESHORE_HOME", str(tmp_path / "home"))
    for name in ("LAKESHORE_URL", "LAKESHORE_NAMESPACE", "LAKESHORE_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    reset_default_plane()
    yield tmp_path / "home"
    reset_default_plane()


def test_constructing_a_queue_touches_nothing(home: Path) -> None:
    dls.SyncQueue("gpu")
    dls.Queue("gpu")

    assert not home.exists()


def test_first_use_opens_the_sqlite_plane_under_lakeshore_home(home: Path) -> None:
    q = dls.SyncQueue("gpu")

    inv = q.submit({"x": 1})

    assert (home / "lakeshore.db").exists()
    plane = default_plane()
    assert isinstance(plane, dls.Dispatch)
    assert q.dispatch is plane
    assert plane.namespace == "default"
    assert dls.SyncQueue("gpu").status(inv).state == "queued"


def test_the_default_plane_is_shared_until_reset(home: Path) -> None:
    first = default_plane()

    assert default_plane() is first
    reset_default_plane()
    assert default_plane() is not first


def test_a_new_home_after_reset_is_a_new_plane(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inv = dls.SyncQueue("gpu").submit(1)

    monkeypatch.setenv("LAKESHORE_HOME", str(tmp_path / "elsewhere"))

    assert (tmp_path / "elsewhere" / "lakeshore.db").exists() is False
    assert dls.SyncQueue("gpu").count() == 0
    assert (tmp_path / "elsewhere" / "lakeshore.db").exists()
    with pytest.raises(DispatchError):
        dls.SyncQueue("gpu").status(inv)


def test_lakeshore_namespace_selects_the_namespace(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKESHORE_NAMESPACE", "team-a")

    assert default_plane().namespace == "team-a"


def test_another_process_reads_a_result_by_id(home: Path) -> None:
    q = dls.SyncQueue("gpu")
    inv = q.submit(dls.thunk(sum, [1, 2, 3]))
    assert dls.run_worker(q, once=True) == 1

    code = (
        "import sys, dreamlake.lakeshore as dls\n"
        "print(dls.SyncQueue('gpu').result(sys.argv[1], timeout=10))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, inv], capture_output=True, text=True, timeout=60, check=True
    )

    assert out.stdout.strip() == "6"


def test_another_process_runs_the_worker(home: Path) -> None:
    q = dls.SyncQueue("gpu")
    inv = q.submit(dls.thunk(pow, 2, 10))
    code = (
        "import dreamlake.lakeshore as dls\n"
        "print(dls.run_worker(dls.SyncQueue('gpu'), once=True))\n"
    )

    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )

    assert out.stdout.strip() == "1"
    assert q.result(inv, timeout=5) == 1024


def test_lakeshore_url_selects_http_dispatch(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKESHORE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("LAKESHORE_TOKEN", "not-a-real-token")

    try:
        plane = default_plane()
    except DispatchError as err:  # a build without the HTTP plane says so clearly
        assert "LAKESHORE_URL" in str(err) or "HttpPlane" in str(err)
    else:
        assert isinstance(plane, dls.HttpDispatch)
        assert not (home / "lakeshore.db").exists()


# -- Dispatch() with no target is the box's plane, never a private one in memory ---------------


def test_a_bare_dispatch_is_the_box_s_plane_that_other_processes_see(home: Path) -> None:
    with dls.Dispatch() as plane:
        inv = dls.SyncQueue("gpu", dispatch=plane).submit({"x": 1})

    assert isinstance(plane, dls.Dispatch)
    assert plane.target == str(home / "lakeshore.db") and plane.namespace == "default"
    code = (
        "import sys, dreamlake.lakeshore as dls\n"
        "print(dls.SyncQueue('gpu').status(sys.argv[1]).state)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, inv], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "queued"


def test_closing_a_bare_dispatch_leaves_the_process_default_open(home: Path) -> None:
    inv = dls.SyncQueue("gpu").submit(1)

    dls.Dispatch().close()

    assert dls.SyncQueue("gpu").status(inv).state == "queued"


def test_a_bare_dispatch_takes_lakeshore_namespace_unless_given_one(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKESHORE_NAMESPACE", "team-a")

    with dls.Dispatch() as bare, dls.Dispatch(namespace="team-b") as named:
        assert (bare.namespace, named.namespace) == ("team-a", "team-b")
    with dls.Dispatch(":memory:") as memory:  # an explicit target keeps its own default
        assert memory.namespace == "default"


def test_a_bare_dispatch_under_lakeshore_url_is_http(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKESHORE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("LAKESHORE_TOKEN", "not-a-real-token")
    monkeypatch.setenv("LAKESHORE_NAMESPACE", "team-a")

    with dls.Dispatch() as plane, dls.Dispatch(":memory:") as memory:
        assert isinstance(plane, dls.HttpDispatch)
        assert (plane.url, plane.namespace) == ("http://127.0.0.1:9", "team-a")
        assert isinstance(memory, dls.Dispatch) and memory.target == ":memory:"
    assert not (home / "lakeshore.db").exists()


# -- names that say what a plane is: LocalPlane and HttpPlane beside the seeds' names --------


def test_a_local_plane_is_a_local_plane_even_under_lakeshore_url(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKESHORE_URL", "http://127.0.0.1:9")

    with dls.LocalPlane(":memory:") as memory, dls.LocalPlane() as box:
        assert isinstance(memory, dls.LocalPlane) and isinstance(box, dls.LocalPlane)
        assert box.target == str(home / "lakeshore.db")
        assert repr(memory) == "LocalPlane(':memory:', namespace='default')"
    with dls.Dispatch() as bare:  # the seeds' name still follows LAKESHORE_URL
        assert isinstance(bare, dls.HttpPlane) and not isinstance(bare, dls.LocalPlane)


def test_the_old_names_are_the_same_planes() -> None:
    from dreamlake.lakeshore import plane

    assert dls.HttpPlane is dls.HttpDispatch is plane.HttpPlane is plane.HttpDispatch
    assert dls.LocalPlane is plane.LocalPlane and dls.Dispatch is plane.Dispatch
    assert issubclass(dls.Dispatch, dls.LocalPlane)
    with dls.Dispatch(":memory:") as old:
        assert isinstance(old, dls.Dispatch) and isinstance(old, dls.LocalPlane)


def test_a_server_address_given_to_dispatch_is_an_http_plane_and_creates_no_file(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A URL once became a SQLite file under a folder named `http:` in the working directory:
    a plane that looked connected and served nobody."""
    monkeypatch.chdir(tmp_path)
    with dls.Dispatch("http://127.0.0.1:9", namespace="ml") as plane:
        assert isinstance(plane, dls.HttpPlane)
        assert repr(plane) == "HttpPlane('http://127.0.0.1:9', namespace='ml')"
    assert not (tmp_path / "http:").exists()


@pytest.mark.parametrize("target", ["http://127.0.0.1:9", "https://plane.example", "redis://x"])
def test_a_local_plane_refuses_an_address_that_is_not_a_store(
    target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidArgument) as refused:
        dls.LocalPlane(target)
    assert f"{target!r} is not a store" in str(refused.value)
    assert "postgresql://" in str(refused.value) and "HttpPlane(url)" in str(refused.value)
    assert list(tmp_path.iterdir()) == []  # nothing made
