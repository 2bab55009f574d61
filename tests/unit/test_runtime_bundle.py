"""What one job ships (issue 46, sdk/runtime/bundle.py): its workdir and the producer's own
modules as one tree, and the runtime object its invocation carries."""

from __future__ import annotations

import importlib
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.runtime.bundle import bundle_of, spec_of
from dreamlake.lakeshore.runtime.resolve import code_of


@pytest.fixture
def own_package(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A package of the producer's own, importable here under a name no other test uses."""
    name = f"ownpkg_{uuid.uuid4().hex[:8]}"
    root = tmp_path / "src"
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text("")
    (root / name / "features.py").write_text("def scale(x):\n    return 3 * x\n")
    (root / name / "unused.py").write_text("VALUE = 1\n")
    sys.path.insert(0, str(root))
    try:
        yield name, root / name
    finally:
        sys.path.remove(str(root))
        for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[module]


def test_a_function_of_an_own_package_ships_the_whole_package(
    own_package: tuple[str, Path],
) -> None:
    name, _ = own_package
    scale = importlib.import_module(f"{name}.features").scale
    bundle = bundle_of(dls.Runtime(), code_of(dls.thunk(scale, 2)))
    assert bundle is not None
    paths = sorted(e.path for e in bundle.manifest.entries)
    assert paths == [f"python/{name}/{f}" for f in ("__init__.py", "features.py", "unused.py")]
    spec = spec_of(dls.Runtime(), bundle)
    assert spec is not None
    assert spec["sources"] == [name] and spec["files"] == 3 and spec["workdir"] is False
    assert spec["bundle"] == bundle.manifest.digest


def test_include_source_false_and_standard_library_code_ship_nothing(
    own_package: tuple[str, Path],
) -> None:
    name, _ = own_package
    scale = importlib.import_module(f"{name}.features").scale
    assert bundle_of(dls.Runtime(include_source=False), code_of(dls.thunk(scale, 2))) is None
    assert bundle_of(dls.Runtime(), code_of(dls.thunk(os.path.join, "a", "b"))) is None
    assert spec_of(dls.Runtime(), None) is None
    assert code_of({"plain": "data"}) == ()


def test_an_edit_inside_the_clock_tick_is_never_missed(own_package: tuple[str, Path]) -> None:
    """Same size, same second: the file's hash is taken again, not remembered."""
    name, folder = own_package
    scale = importlib.import_module(f"{name}.features").scale
    first = bundle_of(dls.Runtime(), code_of(dls.thunk(scale, 2)))
    features = folder / "features.py"
    stat = features.stat()
    features.write_text("def scale(x):\n    return 5 * x\n")
    os.utime(features, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # even the mtime kept
    second = bundle_of(dls.Runtime(), code_of(dls.thunk(scale, 2)))
    assert first is not None and second is not None
    assert first.manifest.digest != second.manifest.digest
    changed = first.manifest.blobs() ^ second.manifest.blobs()
    assert len(changed) == 2  # the old features.py and the new one, nothing else


def test_a_workdir_ships_under_workdir_with_its_ignore_rules(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "big.bin").write_bytes(b"x" * 1000)
    (tmp_path / ".gitignore").write_text("data/\n")
    runtime = dls.Runtime(workdir=tmp_path, env={"MODE": "fast"})
    bundle = bundle_of(runtime)
    assert bundle is not None and bundle.workdir
    assert sorted(e.path for e in bundle.manifest.entries) == [
        "workdir/.gitignore",
        "workdir/train.py",
    ]
    spec: dict[str, Any] | None = spec_of(runtime, bundle)
    assert spec is not None and spec["workdir"] is True and spec["env"] == {"MODE": "fast"}
    assert bundle.files[next(e.sha256 for e in bundle.manifest.entries if e.path.endswith(".py"))]


def test_requirements_without_a_bundle_still_make_a_runtime(tmp_path: Path) -> None:
    spec = spec_of(dls.Runtime(requirements=["einops>=0.7"]), None)
    assert spec == {
        "bundle": None,
        "requirements": ["einops>=0.7"],
        "env": {},
        "workdir": False,
        "sources": [],
        "files": 0,
        "bytes": 0,
    }


def test_a_workdirs_pyproject_gives_the_requirements_when_none_are_given(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\ndependencies = ["einops >= 0.7", "tqdm"]\n'
    )
    runtime = dls.Runtime(workdir=tmp_path)
    spec = spec_of(runtime, bundle_of(runtime))
    assert spec is not None and spec["requirements"] == ["einops>=0.7", "tqdm"]
    (tmp_path / "pyproject.toml").write_text('[project]\ndependencies = ["not a requirement!"]\n')
    with pytest.raises(InvalidArgument, match="not a requirement"):
        spec_of(runtime, bundle_of(runtime))
