"""Which files of a folder ship with a job: git's ignore rules, and a few folders no job needs.

A working directory is usually a git checkout, so its `.gitignore` files already say what is
not source: a checkpoint folder, a dataset, build output. They are read with git's own rules
(pathspec's `GitIgnoreSpec`: negation, anchored and directory patterns, each file applying to
its own folder and below), so `data/*` in the top `.gitignore` leaves `src/project/data/` alone
as git does. `.lakeshoreignore` files add rules that git should not know about (same syntax,
read after `.gitignore` in each folder, so they can also re-include with `!`).

The defaults are folders that are never a job's code and can be huge (`.git` alone bloats a
checkout past any sane size); they are pruned without being walked. Nothing else is skipped
silently: a package under a dot folder ships like any other.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Final

from pathspec import GitIgnoreSpec

from dreamlake.lakeshore.errors import InvalidArgument

__all__ = ["DEFAULT_EXCLUDES", "IGNORE_FILES", "IgnoreRules", "walk"]

#: Never shipped unless an ignore file re-includes them (`!name`).
DEFAULT_EXCLUDES: Final = (
    ".git/",
    ".hg/",
    ".svn/",
    ".venv/",
    "venv/",
    "__pycache__/",
    "*.pyc",
    ".mypy_cache/",
    ".pytest_cache/",
    ".ruff_cache/",
    "node_modules/",
    ".env*",
)
#: The longest ignore pattern taken from a caller (a real one is a path or two).
MAX_PATTERN_CHARS: Final = 4096
#: Read in each folder, in this order (a later file's rule wins over an earlier one's).
IGNORE_FILES: Final = (".gitignore", ".lakeshoreignore")


@dataclass
class IgnoreRules:
    """The rules in force for one tree: the defaults and the caller's `excludes` at its root,
    then each folder's ignore files for that folder and below."""

    excludes: Sequence[str] = ()
    #: (folder relative to the root, its spec), outermost first.
    _layers: list[tuple[PurePosixPath, GitIgnoreSpec]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for pattern in self.excludes:
            _check_pattern(pattern)
        root = _compile([*DEFAULT_EXCLUDES, *self.excludes])
        self._layers = [(PurePosixPath("."), root)]

    def enter(self, folder: Path, rel: PurePosixPath) -> int:
        """Read `folder`'s ignore files; returns how many layers to drop on leaving it."""
        lines: list[str] = []
        for name in IGNORE_FILES:
            path = folder / name
            if path.is_file():
                lines += path.read_text(encoding="utf-8", errors="replace").splitlines()
        if not lines:
            return 0
        try:
            spec = _compile(lines)
        except ValueError:  # git passes over a line it cannot read; so does this
            spec = _compile([line for line in lines if _readable(line)])
        self._layers.append((rel, spec))
        return 1

    def leave(self, count: int) -> None:
        del self._layers[len(self._layers) - count :]

    def ignored(self, rel: PurePosixPath, is_dir: bool) -> bool:
        """git's answer for `rel`: the last layer with a rule that matches it decides."""
        verdict = False
        for base, spec in self._layers:
            sub = rel if base == PurePosixPath(".") else _under(rel, base)
            if sub is None:
                continue
            text = f"{sub.as_posix()}/" if is_dir else sub.as_posix()
            result = spec.check_file(text)
            if result.include is not None:
                verdict = result.include
        return verdict


def _compile(lines: Sequence[str]) -> GitIgnoreSpec:
    """pathspec's spec for `lines`; the regex module's warnings on odd brackets are its own,
    not the user's, and are not shown."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return GitIgnoreSpec.from_lines(lines)


def _readable(line: str) -> bool:
    try:
        _compile([line])
    except ValueError:
        return False
    return True


def _check_pattern(pattern: str) -> None:
    if len(pattern) > MAX_PATTERN_CHARS:
        raise InvalidArgument(
            f"an exclude pattern is at most {MAX_PATTERN_CHARS} characters, not {len(pattern)}"
        )
    if not _readable(pattern):
        raise InvalidArgument(f"exclude pattern {pattern!r} is not a pattern git can read")


def _under(rel: PurePosixPath, base: PurePosixPath) -> PurePosixPath | None:
    try:
        return rel.relative_to(base)
    except ValueError:
        return None


def walk(
    root: Path, excludes: Sequence[str] = (), *, entered: list[str] | None = None
) -> Iterator[tuple[PurePosixPath, os.DirEntry[str]]]:
    """Every entry of `root` that ships, files and symlinks, as (path relative to root, entry),
    in a stable order. An ignored folder is not entered (git's rule too: a file under an
    excluded folder cannot be re-included). `entered` collects the folders read."""
    rules = IgnoreRules(excludes)
    yield from _walk(root, PurePosixPath("."), rules, entered)


def _walk(
    folder: Path, rel: PurePosixPath, rules: IgnoreRules, entered: list[str] | None
) -> Iterator[tuple[PurePosixPath, os.DirEntry[str]]]:
    pushed = rules.enter(folder, rel)
    if entered is not None:
        entered.append(str(folder))
    try:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            path = rel / entry.name if rel != PurePosixPath(".") else PurePosixPath(entry.name)
            is_dir = entry.is_dir(follow_symlinks=False)
            if rules.ignored(path, is_dir):
                continue
            if is_dir:
                yield from _walk(Path(entry.path), path, rules, entered)
            else:
                yield path, entry
    finally:
        rules.leave(pushed)
