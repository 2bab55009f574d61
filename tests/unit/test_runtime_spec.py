"""`Runtime` (issue 46): bad input is refused where it is written, naming the field; and the
producer's own modules a job reaches are found, what every box has is not."""

from __future__ import annotations

import importlib
import json
import operator
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.runtime import Runtime, own_sources

#: The installed `lakeshore` script beside this interpreter.
LAKESHORE = str(Path(sys.executable).parent / "lakeshore")


def test_a_runtime_keeps_its_checked_fields(tmp_path: Path) -> None:
    reqs = tmp_path / "requirements.txt"
    (tmp_path / "base.txt").write_text("numpy>=1.26  # pinned by the box anyway\n")
    reqs.write_text("# the job's needs\n-r base.txt\n\neinops >= 0.7\ntyper[all]==0.12.*\n")
    rt = Runtime(workdir=tmp_path, requirements=reqs, env={"WANDB_MODE": "offline"})
    assert rt.workdir == str(tmp_path.resolve())
    assert rt.requirements == ("numpy>=1.26", "einops>=0.7", "typer[all]==0.12.*")
    assert rt.env == {"WANDB_MODE": "offline"}
    assert rt.include_source is True
    assert Runtime(requirements=["torch >=2"]).requirements == ("torch>=2",)


def test_a_workdirs_project_files_stand_in_for_requirements(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname='x'\n")
    assert Runtime(workdir=tmp_path).project_files == ["pyproject.toml"]
    assert Runtime(workdir=tmp_path, requirements=["einops"]).project_files == []


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"workdir": "/no/such/folder"}, "workdir '/no/such/folder' does not exist"),
        ({"workdir": 3}, "workdir must be a folder's path"),
        ({"requirements": ["numpy>=", "ok"]}, "'numpy>=' is not a requirement"),
        ({"requirements": [1]}, "requirements must be a list of requirement strings"),
        ({"requirements": "/no/reqs.txt"}, "requirements file '/no/reqs.txt' does not exist"),
        ({"env": {"N": 3}}, r"env\['N'\] must be a string, not int 3"),
        ({"env": {"A=B": "x"}}, "env name 'A=B' is not a variable name"),
        ({"env": ["A"]}, "env must be a map"),
        ({"excludes": "data/"}, "excludes must be a list of ignore patterns"),
        ({"include_source": "no"}, "include_source must be True or False"),
    ],
)
def test_bad_input_is_refused_naming_the_field(kwargs: dict[str, object], words: str) -> None:
    with pytest.raises(InvalidArgument, match=words):
        Runtime(**kwargs)  # type: ignore[arg-type]


def test_a_requirements_file_may_not_choose_where_packages_come_from(tmp_path: Path) -> None:
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("einops\n--index-url https://mirror.example/simple\n")
    with pytest.raises(InvalidArgument, match=r"requirements.txt:2: option '--index-url'"):
        Runtime(requirements=reqs)
    reqs.write_text("-r requirements.txt\n")
    with pytest.raises(InvalidArgument, match="includes itself"):
        Runtime(requirements=reqs)


@pytest.fixture
def producer(tmp_path: Path) -> Iterator[Path]:
    """The issue's producer folder: a package of the user's and a module using it."""
    (tmp_path / "myproj").mkdir()
    (tmp_path / "myproj" / "__init__.py").write_text("")
    (tmp_path / "myproj" / "features.py").write_text("def scale(x):\n    return 3 * x\n")
    (tmp_path / "mytasks.py").write_text(
        "from myproj.features import scale\n\ndef double(x):\n    return 2 * scale(x)\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("mytasks", "myproj", "myproj.features"):
            sys.modules.pop(name, None)


def test_the_producers_own_modules_are_found_through_a_functions_reach(producer: Path) -> None:
    # `double` is pickled by reference (mytasks.double), and mytasks imports myproj: the
    # worker needs both, the package as its folder
    mytasks = importlib.import_module("mytasks")
    found = own_sources(dls.thunk(mytasks.double, 3))
    assert [(s.name, s.path, s.is_package) for s in found] == [
        ("myproj", producer / "myproj", True),
        ("mytasks", producer / "mytasks.py", False),
    ]
    # a function of the producer's among the arguments counts too
    features = importlib.import_module("myproj.features")
    assert [s.name for s in own_sources(dls.thunk(operator.add, features.scale, 1))] == ["myproj"]


def test_what_every_box_has_is_not_shipped() -> None:
    # the standard library, installed distributions (this one is editable), numpy's arrays
    import numpy as np

    assert own_sources(dls.thunk(operator.add, 1, 2), json.dumps, np.zeros(3), dls.thunk) == []


def test_lakeshore_runtime_inspect_names_what_would_ship(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "pack").write_bytes(b"x" * 10_000)
    (tmp_path / "train.py").write_text("print('train')\n")
    (tmp_path / "weights.bin").write_bytes(b"w" * 5000)
    shown = subprocess.run(
        [LAKESHORE, "runtime", "inspect", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "files   2\n" in shown and "size    4.9 KiB" in shown
    lines = shown.splitlines()
    assert lines[lines.index("largest      size") + 1].split() == ["weights.bin", "4.9", "KiB"]
    as_json = subprocess.run(
        [LAKESHORE, "runtime", "inspect", "--json", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert json.loads(as_json)["largest"][0] == {"path": "weights.bin", "bytes": 5000}


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path: Path) -> None:
    # `lakeshore runtime inspect DIR | head -1`: the pipe closes while the command writes
    for i in range(50):
        (tmp_path / f"m{i}.py").write_text("")
    read, write = os.pipe()
    os.close(read)
    done = subprocess.run(
        [LAKESHORE, "runtime", "inspect", str(tmp_path)],
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    os.close(write)
    assert (done.returncode, done.stderr) == (141, "")
