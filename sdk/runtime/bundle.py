"""What one job ships: its runtime's folder and the producer's own modules, as one manifest.

A bundle is a single tree so that a daemon fetches, caches and lays out one thing per job:
`workdir/...` is the Runtime's folder (the job's working directory on the worker) and
`python/...` holds the producer's own top-level packages and module files that the job's code
reaches (sources.py), which the worker puts on `sys.path`. The invocation carries only the
small `spec` (the bundle's digest, its requirements and variables, what shipped), never the
tree: the plane stores the manifest and its blobs once, however many jobs name them.

Scanning is cheap to repeat: a file's hash is kept while its size, mtime and inode stay the
same (manifest.py), so a producer that submits in a loop stats its files, it does not reread
them, and an edited file is hashed again at the next submit.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from dreamlake.lakeshore.errors import InvalidArgument

from .limits import check_size
from .manifest import Entry, Manifest, file_sha256, scan
from .sources import Source, own_sources
from .spec import Runtime

__all__ = ["PYTHON", "WORKDIR", "Bundle", "bundle_of", "spec_of"]

#: The two parts of a bundle's tree.
WORKDIR: Final = "workdir"
PYTHON: Final = "python"


@dataclass(frozen=True)
class Bundle:
    """A bundle's manifest, and where on this box each of its blobs can be read."""

    manifest: Manifest
    #: blob sha256 -> a local file with those bytes (the first path that had them).
    files: dict[str, Path] = field(repr=False)
    sources: tuple[str, ...] = ()
    workdir: bool = False


def bundle_of(runtime: Runtime, code: Sequence[Any] = ()) -> Bundle | None:
    """The tree `runtime` ships for a job whose code is `code` (its function, arguments);
    None when nothing ships."""
    entries: list[Entry] = []
    files: dict[str, Path] = {}
    if runtime.workdir is not None:
        root = Path(runtime.workdir)
        part = scan(root, runtime.excludes, prefix=WORKDIR)
        _add(entries, files, part, root, WORKDIR)
    sources: list[Source] = own_sources(*code) if runtime.include_source and code else []
    for source in sources:
        if source.is_package:
            prefix = f"{PYTHON}/{source.name}"
            _add(
                entries,
                files,
                scan(source.path, runtime.excludes, prefix=prefix),
                source.path,
                prefix,
            )
        else:
            entries.append(_file_entry(source.path, f"{PYTHON}/{source.path.name}", files))
    if not entries:
        return None
    manifest = Manifest(tuple(entries))
    check_size(manifest, "the job's runtime")
    return Bundle(
        manifest, files, tuple(s.name for s in sources), workdir=runtime.workdir is not None
    )


def spec_of(runtime: Runtime, bundle: Bundle | None) -> dict[str, Any] | None:
    """The invocation's `runtime` object (the plane's contract); None when the job brings
    nothing: no tree, no requirements, no variables."""
    requirements = list(runtime.requirements) or _project_requirements(runtime)
    if bundle is None and not requirements and not runtime.env:
        return None
    files = [e for e in bundle.manifest.entries if e.link is None] if bundle else []
    return {
        "bundle": bundle.manifest.digest if bundle else None,
        "requirements": requirements,
        "env": dict(runtime.env),
        "workdir": bundle.workdir if bundle else False,
        "sources": list(bundle.sources) if bundle else [],
        "files": len(files),
        "bytes": sum(e.size for e in files),
    }


def _add(
    entries: list[Entry], files: dict[str, Path], part: Manifest, root: Path, prefix: str
) -> None:
    cut = len(prefix) + 1
    for entry in part.entries:
        entries.append(entry)
        if entry.sha256 is not None:
            files.setdefault(entry.sha256, root / entry.path[cut:])


def _file_entry(path: Path, name: str, files: dict[str, Path]) -> Entry:
    info = path.stat()
    sha = file_sha256(str(path), info)
    files.setdefault(sha, path)
    return Entry(name, stat.S_IMODE(info.st_mode), info.st_size, sha)


def _project_requirements(runtime: Runtime) -> list[str]:
    """A workdir's `pyproject.toml` `[project] dependencies`, when no requirements were given
    (a uv.lock pins them further on the producer's box; the worker resolves against its own
    packages, so the ranges are what travels)."""
    if "pyproject.toml" not in runtime.project_files:
        return []
    path = os.path.join(runtime.workdir or "", "pyproject.toml")
    try:
        import tomllib
    except ImportError:  # Python 3.10
        raise InvalidArgument(
            f"Runtime: reading {path} needs Python 3.11 or later; pass requirements= instead"
        ) from None
    try:
        with open(path, "rb") as f:
            project = tomllib.load(f).get("project", {})
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InvalidArgument(f"Runtime: {path} could not be read as TOML: {exc}") from None
    deps = project.get("dependencies", []) if isinstance(project, dict) else []
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise InvalidArgument(f"Runtime: {path}'s [project] dependencies must be a list of strings")
    return list(Runtime(requirements=deps).requirements)
