"""`dls.Runtime`: what a job brings besides its call, checked where it is written.

A producer and the fleet share no dependency set (the design note's promise), so a job can
carry its code and its requirements: a working directory, requirement strings or a
requirements file, environment variables, more ignore patterns. Everything here is checked
when the value is made, which is before a submit stores anything, and each refusal names the
field and what it allows: a typo found on a GPU box an hour later is the failure to avoid.

Where packages come from (an index URL, find-links) is never the job's to say: it is the box's
setting (the daemon's uv environment), so those options are refused in a requirements file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from dreamlake.lakeshore.errors import InvalidArgument

__all__ = ["Runtime", "read_requirements"]

#: Files in a workdir that declare its requirements when `requirements` is not given.
PROJECT_FILES = ("pyproject.toml", "uv.lock")


@dataclass(frozen=True, init=False)
class Runtime:
    """A job's runtime: `Runtime(workdir=".", requirements=["einops>=0.7"])`.

    `workdir`: a folder that ships and is the job's working directory and first `sys.path`
    entry on the worker. `requirements`: requirement strings, or the path of a requirements
    file (resolved now, `-r` includes too). `env`: variables for the job's process. `excludes`:
    ignore patterns (git's syntax) on top of the defaults and the folder's `.gitignore`.
    `include_source`: ship the producer's own modules that the job's code reaches (default).
    """

    workdir: str | None = None
    requirements: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    excludes: tuple[str, ...] = ()
    include_source: bool = True

    def __init__(
        self,
        *,
        workdir: str | os.PathLike[str] | None = None,
        requirements: Sequence[str] | str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        excludes: Sequence[str] = (),
        include_source: bool = True,
    ) -> None:
        folder = _check_workdir(workdir)
        object.__setattr__(self, "workdir", folder)
        object.__setattr__(self, "requirements", _check_requirements(requirements))
        object.__setattr__(self, "env", _check_env(env))
        object.__setattr__(self, "excludes", _check_excludes(excludes))
        if not isinstance(include_source, bool):
            raise InvalidArgument(
                f"Runtime: include_source must be True or False, not {include_source!r}"
            )
        object.__setattr__(self, "include_source", include_source)

    @property
    def project_files(self) -> list[str]:
        """The workdir's own requirement declarations, used when `requirements` is empty."""
        if self.requirements or self.workdir is None:
            return []
        return [name for name in PROJECT_FILES if (Path(self.workdir) / name).is_file()]


def _check_workdir(workdir: Any) -> str | None:
    if workdir is None:
        return None
    if not isinstance(workdir, (str, os.PathLike)):
        raise InvalidArgument(f"Runtime: workdir must be a folder's path, not {workdir!r}")
    path = Path(workdir).expanduser()
    try:
        found = path.is_dir()
    except OSError:  # a name too long for the file system: no such folder
        found = False
    if not found:
        raise InvalidArgument(
            f"Runtime: workdir {str(workdir)[:200]!r} does not exist or is not a folder"
        )
    return str(path.resolve())


def _check_requirements(requirements: Any) -> tuple[str, ...]:
    if requirements is None:
        return ()
    if isinstance(requirements, (str, os.PathLike)):
        return tuple(read_requirements(Path(requirements)))
    if not isinstance(requirements, Sequence) or not all(isinstance(r, str) for r in requirements):
        raise InvalidArgument(
            "Runtime: requirements must be a list of requirement strings or the path of a "
            f"requirements file, not {requirements!r}"
        )
    return tuple(_parse(r, "requirements") for r in requirements)


def _parse(line: str, where: str) -> str:
    text = line.strip()
    try:
        return str(Requirement(text))
    except InvalidRequirement as exc:
        raise InvalidArgument(f"{where}: {text!r} is not a requirement: {exc}") from None


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a name too long for the file system, say: no file by that name
        return False


def read_requirements(path: Path, _seen: frozenset[Path] = frozenset()) -> list[str]:
    """A requirements file's requirement strings: comments and blank lines skipped, `-r FILE`
    followed; options that choose where packages come from refused (the box decides)."""
    path = path.expanduser()
    if not _is_file(path):
        shown = str(path) if len(str(path)) <= 200 else str(path)[:200] + "..."
        raise InvalidArgument(f"Runtime: requirements file {shown!r} does not exist")
    resolved = path.resolve()
    if resolved in _seen:
        raise InvalidArgument(f"Runtime: requirements file {str(path)!r} includes itself")
    out: list[str] = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        where = f"{path}:{number}"
        if line.startswith(("-r ", "--requirement ")):
            include = path.parent / line.split(None, 1)[1].strip()
            out += read_requirements(include, _seen | {resolved})
        elif line.startswith("-"):
            option = line.split()[0]
            raise InvalidArgument(
                f"{where}: option {option!r} is not taken in a job's requirements: where "
                "packages come from is the worker box's setting (its uv environment); use "
                "requirement lines and -r includes only"
            )
        else:
            out.append(_parse(line, where))
    return out


def _check_env(env: Any) -> dict[str, str]:
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise InvalidArgument(f"Runtime: env must be a map of names to strings, not {env!r}")
    for name, value in env.items():
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise InvalidArgument(f"Runtime: env name {name!r} is not a variable name")
        if not isinstance(value, str):
            raise InvalidArgument(
                f"Runtime: env[{name!r}] must be a string, not {type(value).__name__} {value!r}"
            )
    return dict(env)


def _check_excludes(excludes: Any) -> tuple[str, ...]:
    if isinstance(excludes, str) or not all(isinstance(p, str) for p in excludes):
        raise InvalidArgument(
            f"Runtime: excludes must be a list of ignore patterns, not {excludes!r}"
        )
    return tuple(excludes)
