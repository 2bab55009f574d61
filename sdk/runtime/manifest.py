"""A folder as a manifest: what a job's code is, as plain data, over content-addressed blobs.

A manifest lists every file that ships (path, mode, size, the sha256 of its bytes) and every
symlink that stays inside the tree (its relative target). It is msgpack-able data, never a
pickle, so a server stores it and a daemon checks it without running anything the producer
wrote. Its digest names the whole tree: the same files give the same digest on any box, so a
daemon's cache and a plane's blob store key on it, and a changed file changes it.

The path rules are checked where a manifest is made and again wherever one is read
(`check_path`), since a manifest sent over raw HTTP need not come from this module.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Final

from dreamlake.lakeshore.errors import InvalidArgument

from .ignore import walk

__all__ = ["Entry", "Manifest", "check_path", "file_sha256", "scan"]

#: Bytes read at a time while hashing (a checkpoint-sized file is never held whole).
_CHUNK: Final = 1 << 20
#: Files whose hash this process remembers (path -> (stat key, sha256)), and how many at most.
_HASHED: dict[str, tuple[tuple[int, int, int, int, int], str]] = {}
_HASHED_MAX: Final = 200_000
#: How long ago a file must have changed for its remembered hash to be trusted.
_SETTLED_NS: Final = 3_000_000_000


@dataclass(frozen=True)
class Entry:
    """One file (`sha256` set) or one symlink (`link` set: its target, relative, in the tree)."""

    path: str
    mode: int
    size: int
    sha256: str | None = None
    link: str | None = None

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"path": self.path, "mode": self.mode, "size": self.size}
        if self.link is not None:
            wire["link"] = self.link
        else:
            wire["sha256"] = self.sha256
        return wire


@dataclass(frozen=True)
class Manifest:
    entries: tuple[Entry, ...]

    @property
    def size(self) -> int:
        return sum(e.size for e in self.entries if e.link is None)

    @property
    def digest(self) -> str:
        """sha256 over the sorted entries: the tree's name, whatever box made it."""
        h = hashlib.sha256()
        for e in sorted(self.entries, key=lambda e: e.path):
            h.update(f"{e.path}\0{e.mode:o}\0{e.sha256 or ''}\0{e.link or ''}\n".encode())
        return f"sha256:{h.hexdigest()}"

    def blobs(self) -> set[str]:
        """The content hashes the tree needs, each once."""
        return {e.sha256 for e in self.entries if e.sha256 is not None}

    def largest(self, count: int = 10) -> list[Entry]:
        files = [e for e in self.entries if e.link is None]
        return sorted(files, key=lambda e: (-e.size, e.path))[:count]

    def to_wire(self) -> dict[str, Any]:
        return {"digest": self.digest, "entries": [e.to_wire() for e in self.entries]}

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> Manifest:
        """A manifest from another party, checked entry by entry before anything uses it."""
        if not isinstance(wire, Mapping) or not isinstance(wire.get("entries"), list):
            raise InvalidArgument("a runtime manifest is a map with a list of 'entries'")
        entries = tuple(_entry_from_wire(item) for item in wire["entries"])
        _check_links(entries)
        manifest = cls(entries)
        if "digest" in wire and wire["digest"] != manifest.digest:
            raise InvalidArgument(
                f"the manifest's digest {wire['digest']!r} does not match its entries "
                f"({manifest.digest})"
            )
        return manifest


def _entry_from_wire(item: Any) -> Entry:
    if not isinstance(item, Mapping):
        raise InvalidArgument("each manifest entry is a map of path, mode, size, sha256|link")
    path, mode, size = item.get("path"), item.get("mode"), item.get("size")
    sha, link = item.get("sha256"), item.get("link")
    if not isinstance(path, str):
        raise InvalidArgument(f"a manifest entry's path must be a string, not {path!r}")
    check_path(path)
    if not isinstance(mode, int) or isinstance(mode, bool) or not 0 <= mode <= 0o7777:
        raise InvalidArgument(f"manifest entry {path!r}: mode must be 0..0o7777, not {mode!r}")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise InvalidArgument(f"manifest entry {path!r}: size must be a whole number >= 0")
    if (sha is None) == (link is None):
        raise InvalidArgument(f"manifest entry {path!r}: give exactly one of sha256 and link")
    if sha is not None and not _is_sha256(sha):
        raise InvalidArgument(f"manifest entry {path!r}: sha256 must be 64 hex digits")
    if link is not None and not isinstance(link, str):
        raise InvalidArgument(f"manifest entry {path!r}: link must be a string")
    return Entry(path, mode, size, sha, link)


def _is_sha256(value: Any) -> bool:
    return (
        isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)
    )


def check_path(path: str) -> None:
    """Refuse a path that could land outside the folder it is laid out in."""
    pure = PurePosixPath(path)
    if not path or path != pure.as_posix() or "\\" in path or "\0" in path:
        raise InvalidArgument(f"manifest path {path!r} is not a plain relative path")
    if pure.is_absolute():
        raise InvalidArgument(f"manifest path {path!r} is absolute; paths are relative")
    if any(part in ("..", ".") for part in pure.parts):
        raise InvalidArgument(f"manifest path {path!r} holds '..' or '.'; paths stay in the tree")


def _check_links(entries: Sequence[Entry]) -> None:
    for e in entries:
        if e.link is not None:
            _check_link(e.path, e.link)


def _check_link(path: str, target: str) -> None:
    """A symlink's target, resolved from its folder, must stay inside the tree."""
    if target.startswith("/") or "\0" in target:
        raise InvalidArgument(
            f"symlink {path!r} -> {target!r} is absolute: only relative links inside the tree ship"
        )
    depth = len(PurePosixPath(path).parts) - 1
    for part in PurePosixPath(target).parts:
        depth += -1 if part == ".." else 0 if part == "." else 1
        if depth < 0:
            raise InvalidArgument(f"symlink {path!r} -> {target!r} leads out of the tree")


def scan(root: Path, excludes: Sequence[str] = (), *, prefix: str = "") -> Manifest:
    """The manifest of `root` as it ships (ignore.py's rules), `prefix/` before each path.

    A producer submitting in a loop scans the same tree each time: the last scan of a tree is
    kept and used again while every folder it read and every file it listed stats as it did
    (a file added, removed or renamed changes its folder's times; an edit changes the file's),
    and nothing in it changed in the last few seconds (`file_sha256`'s rule)."""
    root = Path(root)
    if not _is_dir(root):
        raise InvalidArgument(f"runtime folder {_shown(root)} does not exist or is not a folder")
    key = (str(root), tuple(excludes), prefix)
    kept = _SCANS.get(key)
    if kept is not None and kept.still_true():
        return kept.manifest
    folders: list[str] = []
    files: list[str] = []
    manifest = Manifest(tuple(_entries(root, excludes, prefix, folders, files)))
    _SCANS[key] = _Scan(manifest, *_stat_all(folders), *_stat_all(files))
    if len(_SCANS) > _SCANS_MAX:
        _SCANS.pop(next(iter(_SCANS)))
    return manifest


_StatKey = tuple[int, int, int, int]


def _stat_key(path: str) -> _StatKey | None:
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return (info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)


def _stat_all(paths: list[str]) -> tuple[tuple[str, ...], tuple[_StatKey | None, ...]]:
    return tuple(paths), tuple(_stat_key(p) for p in paths)


@dataclass(frozen=True)
class _Scan:
    manifest: Manifest
    folders: tuple[str, ...]
    folder_stats: tuple[_StatKey | None, ...]
    files: tuple[str, ...]
    file_stats: tuple[_StatKey | None, ...]

    def still_true(self) -> bool:
        settled = time.time_ns() - _SETTLED_NS
        for paths, stats in ((self.folders, self.folder_stats), (self.files, self.file_stats)):
            for path, was in zip(paths, stats, strict=True):
                if was is None or _stat_key(path) != was or max(was[1], was[2]) > settled:
                    return False
        return True


#: The last scan of each tree (root, excludes, prefix), and how many trees are kept.
_SCANS: dict[tuple[str, tuple[str, ...], str], _Scan] = {}
_SCANS_MAX: Final = 64


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:  # a name too long for the file system, say: no folder by that name
        return False


def _shown(path: Path, limit: int = 200) -> str:
    text = str(path)
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _entries(
    root: Path, excludes: Sequence[str], prefix: str, folders: list[str], files: list[str]
) -> Iterable[Entry]:
    for rel, dirent in walk(root, excludes, entered=folders):
        files.append(dirent.path)
        path = f"{prefix}/{rel.as_posix()}" if prefix else rel.as_posix()
        info = dirent.stat(follow_symlinks=False)
        if stat.S_ISLNK(info.st_mode):
            target = os.readlink(dirent.path)
            _check_link(rel.as_posix(), target)
            yield Entry(path, 0o777, 0, link=target)
        elif stat.S_ISREG(info.st_mode):
            yield Entry(
                path, stat.S_IMODE(info.st_mode), info.st_size, file_sha256(dirent.path, info)
            )
        # sockets, fifos and devices are not code: they do not ship


def file_sha256(path: str, info: os.stat_result) -> str:
    """The file's sha256, hashed again only when its size, times or inode changed since this
    process last hashed it: a producer submitting in a loop stats its tree, it does not reread
    it. As git does with its index, a file changed in the last few seconds is never taken from
    memory: a second edit within the file system's clock tick would leave its times as they
    were."""
    key = (info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev)
    found = _HASHED.get(path)
    if found is not None and found[0] == key:
        return found[1]
    digest = _sha256(path)
    if time.time_ns() - max(info.st_mtime_ns, info.st_ctime_ns) > _SETTLED_NS:
        if len(_HASHED) >= _HASHED_MAX:
            _HASHED.clear()
        _HASHED[path] = (key, digest)
    return digest


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()
