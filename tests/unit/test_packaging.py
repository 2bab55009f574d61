"""The wheel holds what an installed Lakeshore needs, and the extras match what is imported.

The wheel is built from a copy of the sources (so parallel runs never share a build/ folder)
by setuptools' PEP 517 backend, the one `pip wheel` and `python -m build` call, in this
virtualenv: no build isolation, so no network.
"""

from __future__ import annotations

import email.parser
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.daemon import unitfiles

tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11+")

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: Extras that are tool sets for working on Lakeshore, not parts of a deployment.
TOOLING = {"dev", "bench", "all"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in {
        Path(d).parts[0] for d in PYPROJECT["tool"]["setuptools"]["package-dir"].values()
    }:
        shutil.copytree(ROOT / folder, src / folder, ignore=ignore)
    built = subprocess.run(
        [
            sys.executable,
            "-c",
            "from setuptools import build_meta; print(build_meta.build_wheel('dist'))",
        ],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    name = built.stdout.strip().splitlines()[-1]
    return zipfile.ZipFile(src / "dist" / name)


def metadata(wheel: zipfile.ZipFile) -> Any:
    (path,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    return email.parser.Parser().parsestr(wheel.read(path).decode())


def test_the_wheel_ships_the_systemd_units_and_the_license(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    for unit in unitfiles.UNITS.values():
        assert f"dreamlake/lakeshore/systemd/{unit}" in names
    (license_path,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    assert b"Apache License" in wheel.read(license_path)
    assert metadata(wheel)["License-Expression"] == "Apache-2.0"


def test_the_wheel_has_one_version_the_package_s(wheel: zipfile.ZipFile) -> None:
    assert metadata(wheel)["Version"] == dls.__version__
    assert "version" not in PYPROJECT["project"]  # written once, in sdk/__init__.py


def test_every_source_module_is_in_the_wheel(wheel: zipfile.ZipFile) -> None:
    """A package folder left out of pyproject's list installs a package that cannot import."""
    mapping = PYPROJECT["tool"]["setuptools"]["package-dir"]
    expected = set()
    for package, folder in mapping.items():
        for path in (ROOT / folder).glob("*.py"):
            expected.add(f"{package.replace('.', '/')}/{path.name}")
    missing = expected - set(wheel.namelist())
    assert not missing, f"not in the wheel: {sorted(missing)}"


def test_pyproject_lists_every_package_folder_and_nothing_else() -> None:
    """The package list is written by hand, twice (`packages` and `package-dir`): a new folder
    left out of it installs a package that cannot import, and only on another machine. Every
    folder under the shipped top-level folders that holds Python is a package (it has an
    __init__.py), listed in both, under the name its path gives."""
    setuptools = PYPROJECT["tool"]["setuptools"]
    mapping: dict[str, str] = setuptools["package-dir"]
    tops = {Path(folder).parts[0] for folder in mapping.values()}
    assert tops == {"sdk", "server", "daemon", "controller", "providers", "cli", "systemd"}
    python_folders = {
        path.parent.relative_to(ROOT).as_posix()
        for top in tops
        for path in (ROOT / top).rglob("*.py")
        if "__pycache__" not in path.parts
    }
    no_init = sorted(f for f in python_folders if not (ROOT / f / "__init__.py").exists())
    assert not no_init, f"Python without an __init__.py, so not a package: {no_init}"

    assert sorted(mapping.values()) == sorted(python_folders), "package-dir against the tree"
    assert sorted(setuptools["packages"]) == sorted(mapping), "packages against package-dir"
    for package, folder in mapping.items():  # the name is the path: dls.plane.store is sdk/...
        top, *rest = Path(folder).parts
        root = "dreamlake.lakeshore" if top == "sdk" else f"dreamlake.lakeshore.{top}"
        assert package == ".".join([root, *rest]), (package, folder)


def test_the_installed_wheel_imports_and_reports_its_version(
    wheel: zipfile.ZipFile, tmp_path: Path
) -> None:
    wheel.extractall(tmp_path)
    code = "import dreamlake.lakeshore as d; print(d.__file__); print(d.__version__)"
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}

    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )

    assert out.returncode == 0, out.stderr
    file, version = out.stdout.split()
    assert Path(file).is_relative_to(tmp_path) and version == dls.__version__


def test_all_brings_every_deployment_extra() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    (all_line,) = extras["all"]
    named = set(all_line.split("[")[1].rstrip("]").split(","))
    assert named == set(extras) - TOOLING


def test_no_extra_requires_a_package_nothing_imports() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    flat = {req.split(">")[0].split("[")[0] for name in extras for req in extras[name]}
    assert "anyio" not in flat  # starlette brings its own; nothing of ours imports it
    # every process logs through sdk/logs.py and serves /metrics (docs/observability.md)
    for process in ("server", "daemon", "controller"):
        assert any(r.startswith("structlog") for r in extras[process]), process
        assert any(r.startswith("prometheus_client") for r in extras[process]), process
    assert any(r.startswith("nvidia-ml-py") for r in extras["gpu"])
