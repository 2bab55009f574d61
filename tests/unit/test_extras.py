"""A missing extra ends in one line naming the module and the pip command, never a traceback.

Each console script runs as its entry point is declared in pyproject.toml, in a fresh
interpreter where a meta-path finder makes the extra's module unimportable, as on a box where
the extra was never installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dreamlake.lakeshore.errors import DispatchError
from dreamlake.lakeshore.extras import EXTRA_OF, MissingExtra, missing_extra, needs_extra

tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11+")

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: The distribution that brings each module EXTRA_OF names.
DISTRIBUTION_OF = {
    "structlog": "structlog",
    "psutil": "psutil",
    "pynvml": "nvidia-ml-py",
    "starlette": "starlette",
    "uvicorn": "uvicorn",
    "prometheus_client": "prometheus_client",
    "psycopg": "psycopg",
    "psycopg_pool": "psycopg-pool",
    "boto3": "boto3",
    "botocore": "boto3",  # boto3 depends on it
    "yaml": "pyyaml",
}

BLOCKER = """
import runpy, sys

class Blocker:
    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None

sys.meta_path.insert(0, Blocker())
"""


def run_blocked(
    blocked: str, target: str, argv: list[str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    """Run `target` (an entry point "module:function", or "-m module") with `blocked` missing."""
    code = f"BLOCKED = {{{blocked!r}}}\n{BLOCKER}\nsys.argv = {argv!r}\n"
    if target.startswith("-m "):
        code += f"runpy.run_module({target[3:]!r}, run_name='__main__', alter_sys=True)\n"
    else:
        module, function = target.split(":")
        code += f"from {module} import {function}\nsys.exit({function}())\n"
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env={**_clean_env(), "LAKESHORE_HOME": str(cwd / "home")},
        capture_output=True,
        text=True,
        timeout=60,
    )


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("LAKESHORE_")}


SCRIPTS: dict[str, str] = PYPROJECT["project"]["scripts"]

CASES = {
    # id: (blocked module, script or "-m module", arguments, extra named)
    "daemon-structlog": ("structlog", "lakeshore-daemon", ["--burst"], "daemon"),
    "daemon-psutil": ("psutil", "lakeshore-daemon", ["--burst"], "daemon"),
    "daemon-m": ("structlog", "-m dreamlake.lakeshore.daemon", ["--burst"], "daemon"),
    "daemon-s3-storage": (
        "boto3",
        "lakeshore-daemon",
        ["--storage", "s3://bucket/prefix", "--burst"],
        "s3",
    ),
    "controller-postgres": (
        "psycopg",
        "lakeshore-controller",
        ["--store", "postgresql://127.0.0.1:9/nowhere", "--once"],
        "postgres",
    ),
    "server": ("uvicorn", "lakeshore", ["server"], "server"),
    "server-prometheus": ("prometheus_client", "lakeshore", ["server"], "server"),
    "server-postgres": (
        "psycopg",
        "lakeshore",
        ["server", "--store", "postgresql://127.0.0.1:9/nowhere"],
        "postgres",
    ),
    "compose": ("yaml", "lakeshore", ["compose", "validate"], "compose"),
}


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_a_missing_extra_is_one_line_with_the_pip_command(
    case: tuple[str, str, list[str], str], tmp_path: Path
) -> None:
    blocked, script, args, extra = case
    (tmp_path / "lakeshore.yaml").write_text("queues: {}\n")
    target = script if script.startswith("-m ") else SCRIPTS[script]
    name = script.removeprefix("-m ")

    result = run_blocked(blocked, target, [name, *args], tmp_path)

    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "Traceback" not in output, output
    last = output.strip().splitlines()[-1]
    assert last.startswith("Error: ") and f"({blocked} is missing)" in last, output
    assert last.endswith(f"pip install 'dreamlake-lakeshore[{extra}]'"), output


def test_a_missing_module_no_extra_brings_keeps_its_traceback(tmp_path: Path) -> None:
    """click is in the base install: without it the install is broken, and says where."""
    result = run_blocked("click", SCRIPTS["lakeshore"], ["lakeshore", "--help"], tmp_path)

    assert result.returncode != 0
    assert "Traceback" in result.stderr and "No module named 'click'" in result.stderr


def test_a_postgres_plane_without_psycopg_names_the_extra(tmp_path: Path) -> None:
    code = (
        "import dreamlake.lakeshore as dls\n"
        "try:\n"
        "    dls.Dispatch('postgresql://127.0.0.1:9/nowhere')\n"
        "except dls.DispatchError as exc:\n"
        "    print(type(exc).__name__, isinstance(exc, ImportError), exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", f"BLOCKED = {{'psycopg_pool'}}\n{BLOCKER}\n{code}"],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.stdout.strip() == (
        "MissingExtra True a postgresql:// store needs the 'postgres' extra (psycopg_pool is "
        "missing): pip install 'dreamlake-lakeshore[postgres]'"
    ), result.stderr


def test_every_extra_module_is_in_the_extra_pyproject_gives_it() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    for module, extra in EXTRA_OF.items():
        names = {_requirement_name(r) for r in extras[extra]}
        assert _requirement_name(DISTRIBUTION_OF[module]) in names, (
            f"{module}: {extra} = {extras[extra]}"
        )


def test_every_console_script_goes_through_the_launcher() -> None:
    for script, target in SCRIPTS.items():
        assert target.startswith("dreamlake.lakeshore.cli.scripts:"), script


def test_only_modules_an_extra_brings_become_missing_extra() -> None:
    ours = ModuleNotFoundError("No module named 'dreamlake.lakeshore.nope'", name="x.nope")
    assert missing_extra(ours, "lakeshore") is None
    with pytest.raises(ModuleNotFoundError) as raised, needs_extra("lakeshore"):
        raise ours
    assert raised.value is ours

    submodule = ModuleNotFoundError("No module named 'botocore.x'", name="botocore.x")
    error = missing_extra(submodule, "the ec2 provider", "ec2")
    assert isinstance(error, MissingExtra) and isinstance(error, DispatchError)
    assert str(error) == (
        "the ec2 provider needs the 'ec2' extra (botocore is missing): "
        "pip install 'dreamlake-lakeshore[ec2]'"
    )


def _requirement_name(requirement: str) -> str:
    for stop in "<>=![;":
        requirement = requirement.split(stop)[0]
    return requirement.strip().lower().replace("_", "-")
