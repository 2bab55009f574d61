"""A job's requirements as a uv environment layered over the daemon's (daemon/environments.py),
built from wheels the test writes itself: no registry, `UV_FIND_LINKS` and `UV_OFFLINE=1`."""

from __future__ import annotations

import importlib.metadata
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `tests.support` is importable however pytest was started
    sys.path.insert(0, str(ROOT))

from dreamlake.lakeshore.daemon.environments import (  # noqa: E402
    Built,
    EnvironmentBuildFailed,
    Environments,
    RequirementRefused,
)
from dreamlake.lakeshore.daemon.uvtool import find_uv, mask  # noqa: E402
from tests.support.wheels import write_wheel  # noqa: E402


@pytest.fixture
def wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A find-links folder: tinypkg (needs the daemon's click), leafpkg, and oldclick (needs a
    click older than the daemon's); uv reads it alone, its cache under the test's folder."""
    folder = tmp_path / "wheels"
    write_wheel(
        folder,
        "tinypkg",
        "1.0",
        requires=["click>=7", "leafpkg"],
        files={"tinypkg/__init__.py": "VALUE = 'tinypkg 1.0'\ndef main():\n    print(VALUE)\n"},
        scripts={"tinycli": "tinypkg:main"},
    )
    write_wheel(folder, "leafpkg", "2.0")
    write_wheel(folder, "oldclick", "1.0", requires=["click<2"])
    write_wheel(folder, "dreamlake-lakeshore", "99.0")  # a newer Lakeshore than the daemon's
    write_wheel(folder, "newlakeshore", "1.0", requires=["dreamlake-lakeshore>=99"])
    monkeypatch.setenv("UV_FIND_LINKS", str(folder))
    monkeypatch.setenv("UV_OFFLINE", "1")
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    return folder


@pytest.fixture
def uv_log(tmp_path: Path) -> Path:
    return tmp_path / "uv.log"


@pytest.fixture
def counting_uv(tmp_path: Path, uv_log: Path) -> str:
    """A uv that writes each of its command lines to `uv.log`, then runs the real uv; with
    UV_TEST_HANG set, a `pip install` touches that file and waits to be killed."""
    script = tmp_path / "uv"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {uv_log}\n'
        'if [ -n "$UV_TEST_HANG" ] && [ "$1" = pip ]; then touch "$UV_TEST_HANG"; '
        "exec sleep 600; fi\n"
        f'exec {find_uv()} "$@"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def runs(uv_log: Path) -> list[str]:
    return uv_log.read_text().splitlines() if uv_log.exists() else []


def run_in(built: Built, code: str) -> str:
    done = subprocess.run([str(built.python), "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_first_ensure_builds_and_the_second_is_a_hit(
    tmp_path: Path, wheels: Path, counting_uv: str, uv_log: Path
) -> None:
    envs = Environments(tmp_path / "envs", uv=counting_uv)

    first = envs.ensure(["tinypkg"])

    assert first.built and first.python.is_file()
    out = run_in(
        first,
        "import sys, tinypkg, leafpkg, click, cloudpickle, dreamlake.lakeshore, "
        "importlib.metadata as m; print(sys.prefix, tinypkg.VALUE, m.version('click'), "
        "click.__file__.startswith(sys.prefix))",
    )
    assert (
        out
        == f"{first.python.parent.parent} tinypkg 1.0 {importlib.metadata.version('click')} False"
    )
    assert len(runs(uv_log)) == 2  # uv venv, uv pip install

    again = envs.ensure(["tinypkg "])

    assert again == Built(first.python, first.key, False, again.seconds)
    assert len(runs(uv_log)) == 2  # no uv run for a hit
    assert (envs.stats.hits, envs.stats.misses) == (1, 1)


def test_the_environment_was_built_elsewhere_and_still_runs_its_scripts(
    tmp_path: Path, wheels: Path
) -> None:
    progress: list[str] = []
    built = Environments(tmp_path / "envs").ensure(["tinypkg"], on_progress=progress.append)

    script = built.python.parent / "tinycli"
    done = subprocess.run([str(script)], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "tinypkg 1.0\n"), done.stderr
    assert any("uv pip install" in line for line in progress)
    assert any("+ tinypkg==1.0" in line for line in progress)  # uv's own lines, as they come
    assert progress[-1].endswith(": ready")


def test_a_new_environments_on_the_same_root_reuses_the_build(
    tmp_path: Path, wheels: Path, counting_uv: str, uv_log: Path
) -> None:
    Environments(tmp_path / "envs", uv=counting_uv).ensure(["leafpkg"])

    after_restart = Environments(tmp_path / "envs", uv=counting_uv).ensure(["leafpkg"])

    assert not after_restart.built
    assert len(runs(uv_log)) == 2


def test_the_key_is_the_requirements_not_their_spelling(tmp_path: Path) -> None:
    envs = Environments(tmp_path)
    assert envs.key(["leafpkg>=1", "tinypkg"]) == envs.key(["tinypkg", "leafpkg >= 1"])
    assert envs.key(["tinypkg"]) != envs.key(["tinypkg>=1"])


def test_eight_threads_build_once(
    tmp_path: Path, wheels: Path, counting_uv: str, uv_log: Path
) -> None:
    envs = Environments(tmp_path / "envs", uv=counting_uv)
    results: list[Built] = []
    threads = [
        threading.Thread(target=lambda: results.append(envs.ensure(["tinypkg"]))) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(b.built for b in results) == [False] * 7 + [True]
    assert len(runs(uv_log)) == 2


ENSURE = """
import sys
from pathlib import Path
from dreamlake.lakeshore.daemon.environments import Environments
built = Environments(Path(sys.argv[1]), uv=sys.argv[2]).ensure(["tinypkg"])
print(built.built)
"""


def test_two_processes_build_once(
    tmp_path: Path, wheels: Path, counting_uv: str, uv_log: Path
) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", ENSURE, str(tmp_path / "envs"), counting_uv],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = sorted(proc.communicate(timeout=60)[0].strip() for proc in procs)

    assert outputs == ["False", "True"]
    assert len(runs(uv_log)) == 2


@pytest.fixture
def killed_mid_build(tmp_path: Path, wheels: Path, counting_uv: str) -> Iterator[Path]:
    """A process whose build was killed -9 during `uv pip install`: the root it left."""
    root = tmp_path / "envs"
    started = tmp_path / "pip-started"
    proc = subprocess.Popen(
        [sys.executable, "-c", ENSURE, str(root), counting_uv],
        env={**os.environ, "UV_TEST_HANG": str(started)},
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "no pip install ran"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    yield root


def test_a_build_killed_midway_leaves_nothing_used(killed_mid_build: Path) -> None:
    envs = Environments(killed_mid_build)
    key = envs.key(["tinypkg"])
    assert not (killed_mid_build / "envs" / key).exists()
    assert list((killed_mid_build / "tmp").glob(f"{key}.*"))  # the half-made build

    built = envs.ensure(["tinypkg"])

    assert built.built
    assert run_in(built, "import tinypkg; print(tinypkg.VALUE)") == "tinypkg 1.0"
    assert not list((killed_mid_build / "tmp").iterdir())  # swept


def test_another_keys_build_sweeps_a_killed_build(killed_mid_build: Path, wheels: Path) -> None:
    assert list((killed_mid_build / "tmp").iterdir())

    assert Environments(killed_mid_build).ensure(["leafpkg"]).built

    assert not list((killed_mid_build / "tmp").iterdir())


def test_an_unsatisfiable_requirement_fails_with_uvs_words_and_is_remembered(
    tmp_path: Path, wheels: Path, counting_uv: str, uv_log: Path
) -> None:
    envs = Environments(tmp_path / "envs", uv=counting_uv)

    with pytest.raises(EnvironmentBuildFailed) as first:
        envs.ensure(["tinypkg>=5"])

    assert first.value.ended_by == "runtime"
    assert "pip install" in first.value.command
    said = " ".join(line.strip() for line in first.value.tail)
    assert "only tinypkg==1.0 is available and you require tinypkg>=5" in said, said
    assert "error: No solution found when resolving dependencies" in str(first.value)
    assert "you require tinypkg>=5" in str(first.value)
    uv_runs = len(runs(uv_log))

    with pytest.raises(EnvironmentBuildFailed) as second:
        envs.ensure(["tinypkg>=5"])

    assert str(second.value) == str(first.value)
    assert second.value.tail == first.value.tail
    assert len(runs(uv_log)) == uv_runs  # failed at once, no uv
    assert not list((tmp_path / "envs" / "tmp").iterdir())


def test_a_failure_is_forgotten_after_failure_memory_s(
    tmp_path: Path, wheels: Path, counting_uv: str, uv_log: Path
) -> None:
    envs = Environments(tmp_path / "envs", uv=counting_uv, failure_memory_s=0.0)
    for _ in range(2):
        with pytest.raises(EnvironmentBuildFailed):
            envs.ensure(["tinypkg>=5"])
    assert sum(line.startswith("pip") for line in runs(uv_log)) == 2


def test_replacing_a_daemon_package_is_refused_naming_it(
    tmp_path: Path, wheels: Path, counting_uv: str, uv_log: Path
) -> None:
    envs = Environments(tmp_path / "envs", uv=counting_uv)
    numpy = importlib.metadata.version("numpy")

    with pytest.raises(RequirementRefused) as refused:
        envs.ensure(["numpy==1.0"])

    assert str(refused.value) == (
        f"numpy==1.0 would replace the daemon's numpy {numpy}; a job's requirements may add "
        "packages, not replace the box's"
    )
    assert runs(uv_log) == []


def test_a_dependency_that_would_replace_a_daemon_package_fails_naming_it(
    tmp_path: Path, wheels: Path
) -> None:
    with pytest.raises(EnvironmentBuildFailed) as failed:
        Environments(tmp_path / "envs").ensure(["oldclick"])
    assert "click<2" in "\n".join(failed.value.tail)
    assert "click==" in "\n".join(failed.value.tail)  # the daemon's version, as a constraint


def test_a_dependency_that_would_replace_the_editable_lakeshore_fails_naming_it(
    tmp_path: Path, wheels: Path
) -> None:
    """The daemon's own Lakeshore is an editable install here, and the find-links folder has
    a newer one: the daemon's version holds as a constraint all the same."""
    lakeshore = importlib.metadata.version("dreamlake-lakeshore")
    with pytest.raises(EnvironmentBuildFailed) as failed:
        Environments(tmp_path / "envs").ensure(["newlakeshore"])
    said = " ".join(line.strip() for line in failed.value.tail)
    assert f"dreamlake-lakeshore>=99 and dreamlake-lakeshore=={lakeshore}" in said, said
    assert not (tmp_path / "envs" / "envs").exists()


@pytest.mark.parametrize(
    "requirement, words",
    [
        ("--index-url https://u:p@example.org/simple", "is an option"),
        ("-i https://example.org/simple", "is an option"),
        ("--extra-index-url https://example.org/simple", "is an option"),
        ("--find-links /tmp/wheels", "is an option"),
        ("-r requirements.txt", "is an option"),
        ("./tinypkg-1.0-py3-none-any.whl", "a local file path is not taken"),
        ("/tmp/tinypkg-1.0-py3-none-any.whl", "a local file path is not taken"),
        ("tinypkg @ file:///tmp/tinypkg-1.0-py3-none-any.whl", "names file URL"),
    ],
)
def test_options_and_local_files_are_refused(
    tmp_path: Path, counting_uv: str, uv_log: Path, requirement: str, words: str
) -> None:
    envs = Environments(tmp_path / "envs", uv=counting_uv)
    with pytest.raises(RequirementRefused, match=words):
        envs.ensure([requirement])
    with pytest.raises(RequirementRefused, match=words):
        envs.key([requirement])
    assert runs(uv_log) == []


def test_credentials_in_urls_are_masked() -> None:
    assert mask("GET https://alice:s3cret@pypi.example.org/simple/x/ 401") == (
        "GET https://***@pypi.example.org/simple/x/ 401"
    )
    assert mask("git+https://token@github.com/o/r") == "git+https://***@github.com/o/r"
