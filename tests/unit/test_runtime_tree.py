"""A job's shipped tree (issue 46): which files a workdir ships, as what manifest, and what a
manifest from another party may hold. The walk and its rules run in the producer, before
anything is stored or uploaded."""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

import pytest

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.runtime import Manifest, RuntimeSizeWarning, check_size, scan


def tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def shipped(root: Path, *excludes: str) -> list[str]:
    return sorted(e.path for e in scan(root, excludes).entries)


def test_the_defaults_drop_vcs_caches_and_envs_but_not_other_dot_folders(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "train.py": "print('hi')",
            ".git/objects/ab": "x" * 1000,
            ".venv/lib/site.py": "",
            "pkg/__pycache__/m.cpython-311.pyc": "",
            "pkg/m.pyc": "",
            "pkg/__init__.py": "",
            "node_modules/a/index.js": "",
            ".env.local": "SECRET=1",
            ".hidden/tool/__init__.py": "",  # a package under a dot folder still ships
        },
    )
    assert shipped(root) == [".hidden/tool/__init__.py", "pkg/__init__.py", "train.py"]


def test_gitignore_rules_are_git_s_negation_anchoring_and_folders(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            ".gitignore": "data/*\n!data/keep.txt\n/build\n*.ckpt\n",
            "data/big.bin": "x",
            "data/keep.txt": "k",
            "src/project/data/__init__.py": "",  # `data/*` is anchored: this one stays
            "build/out.o": "",
            "src/build/notes.md": "",  # `/build` names the top folder only
            "runs/last.ckpt": "",
        },
    )
    assert shipped(root) == [
        ".gitignore",
        "data/keep.txt",
        "src/build/notes.md",
        "src/project/data/__init__.py",
    ]


def test_a_nested_gitignore_applies_below_its_folder_and_lakeshoreignore_adds(
    tmp_path: Path,
) -> None:
    root = tree(
        tmp_path,
        {
            "a/.gitignore": "*.log\n",
            "a/x.log": "",
            "b/y.log": "",  # a/.gitignore does not reach b/
            ".lakeshoreignore": "notebooks/\n!a/keep.log\n",
            "a/keep.log": "",
            "notebooks/n.ipynb": "",
        },
    )
    # `!a/keep.log` in the top .lakeshoreignore is read before a/.gitignore, whose `*.log`
    # (the deeper, later rule) wins, as in git
    assert shipped(root) == [".lakeshoreignore", "a/.gitignore", "b/y.log"]
    assert shipped(root, "b/") == [".lakeshoreignore", "a/.gitignore"]


def test_the_digest_names_the_content_and_an_edit_changes_one_blob(tmp_path: Path) -> None:
    root = tree(tmp_path / "w", {f"m{i}.py": f"x = {i}\n" for i in range(20)})
    before = scan(root)
    assert scan(root).digest == before.digest  # the same tree, the same name
    (root / "m7.py").write_text("x = 'edited'\n")
    after = scan(root)
    assert after.digest != before.digest
    assert after.blobs() - before.blobs() == {e.sha256 for e in after.entries if e.path == "m7.py"}
    # the name does not depend on where the folder is
    copy = tree(tmp_path / "elsewhere", {f"m{i}.py": f"x = {i}\n" for i in range(20)})
    assert scan(copy).digest == before.digest


def test_a_link_inside_the_tree_ships_as_a_link_and_one_leading_out_is_refused(
    tmp_path: Path,
) -> None:
    root = tree(tmp_path / "w", {"src/lib.py": "", "outside.txt": ""})
    os.symlink("src", root / "lib")
    (link,) = [e for e in scan(root).entries if e.path == "lib"]
    assert (link.link, link.sha256) == ("src", None)
    os.symlink("../../etc/passwd", root / "src" / "escape")
    escaping = re.escape("'src/escape' -> '../../etc/passwd' leads out of the tree")
    with pytest.raises(InvalidArgument, match=escaping):
        scan(root)


def test_a_missing_folder_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="does not exist or is not a folder"):
        scan(tmp_path / "nope")


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"path": "../x", "mode": 420, "size": 1, "sha256": "a" * 64}, "holds '..'"),
        ({"path": "/etc/cron.d/x", "mode": 420, "size": 1, "sha256": "a" * 64}, "absolute"),
        ({"path": "a/./b", "mode": 420, "size": 1, "sha256": "a" * 64}, "not a plain relative"),
        ({"path": "ok", "mode": 420, "size": 0, "link": "../../x"}, "leads out of the tree"),
        ({"path": "ok", "mode": 420, "size": 0, "link": "/etc"}, "is absolute"),
        ({"path": "ok", "mode": 420, "size": 1, "sha256": "nothex"}, "64 hex digits"),
        ({"path": "ok", "mode": 99999, "size": 1, "sha256": "a" * 64}, "mode must be"),
        ({"path": "ok", "mode": 420, "size": -1, "sha256": "a" * 64}, "size must be"),
        ({"path": "ok", "mode": 420, "size": 1}, "exactly one of sha256 and link"),
    ],
)
def test_a_manifest_from_another_party_is_checked_entry_by_entry(
    entry: dict[str, object], words: str
) -> None:
    with pytest.raises(InvalidArgument, match=words):
        Manifest.from_wire({"entries": [entry]})


def test_a_manifest_travels_as_plain_data_and_its_digest_is_checked(tmp_path: Path) -> None:
    manifest = scan(tree(tmp_path, {"a.py": "1", "b/c.py": "2"}))
    wire = manifest.to_wire()
    assert Manifest.from_wire(wire) == manifest
    with pytest.raises(InvalidArgument, match="does not match its entries"):
        Manifest.from_wire({**wire, "digest": "sha256:" + "0" * 64})


def test_near_the_size_cap_a_warning_and_over_it_a_refusal_name_the_largest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tree(tmp_path, {"small.py": "x", "weights/model.bin": "w" * 900_000})
    manifest = scan(root)
    monkeypatch.setenv("LAKESHORE_RUNTIME_MAX_MB", "1")
    with pytest.warns(RuntimeSizeWarning, match=r"largest: weights/model.bin \(878.9 KiB\)"):
        check_size(manifest, "workdir")
    monkeypatch.setenv("LAKESHORE_RUNTIME_MAX_MB", "0.5")
    with pytest.raises(InvalidArgument, match=r"against a cap of 512\.0 KiB.*weights/model\.bin"):
        check_size(manifest, "workdir")
    monkeypatch.delenv("LAKESHORE_RUNTIME_MAX_MB")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_size(manifest, "workdir")  # far under the default 1 GiB: silent


def test_an_unreadable_exclude_is_refused_and_an_unreadable_gitignore_line_passed_over(
    tmp_path: Path,
) -> None:
    root = tree(tmp_path, {".gitignore": "!\n*.log\n", "a.log": "", "a.py": ""})
    assert shipped(root) == [".gitignore", "a.py"]  # git too reads past the bad line
    with pytest.raises(InvalidArgument, match="exclude pattern '!' is not a pattern git can"):
        scan(root, ["!"])
    with pytest.raises(InvalidArgument, match="at most 4096 characters, not 5000"):
        scan(root, ["x" * 5000])
