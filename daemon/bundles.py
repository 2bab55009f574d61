"""A job's shipped tree on the box: fetched once, kept read-only, shared by every job using it.

The daemon side of issue 46's bundles. A manifest (sdk/runtime/manifest.py) names a tree by
digest; this cache lays that tree out once per box under `<root>/trees/<digest>` and every job
of that digest reads the same folder. The layout is made in a private temporary folder and
renamed into place whole, under a cross-process lock on the digest, so eight slots (or two
daemons) that claim the same bundle at once fetch it once, and a daemon killed mid-fetch leaves
a temporary folder that the next build sweeps away, never a half-made tree under the real name.

Blobs are kept by content (`<root>/blobs/<sha256>`), so a tree that differs from a cached one by
one file fetches that one file: the rest are hard links to blobs already here. Every blob is
checked against its sha256 as it is written; a tree is read-only once made.

A job holds a shared lock on its tree while it runs (`use`); eviction, least recently used
first past the byte budget, takes only trees it can lock exclusively, so a running job's tree
is never removed under it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final

from dreamlake.lakeshore.errors import DispatchError, InvalidArgument
from dreamlake.lakeshore.runtime import Manifest, check_path

__all__ = ["BlobCorrupt", "BundleCache", "Fetch"]

#: Reads one blob's bytes by its sha256 (from the plane, storage, or a peer on the box).
Fetch = Callable[[str], bytes]
#: Files of a made tree: readable by all, writable by none; the exec bit as shipped.
_READ_ONLY: Final = 0o444
_EXEC_BITS: Final = 0o111
#: Held shared while a tree is laid out and exclusively while evicting: a blob fetched for a
#: tree not yet linked into it looks unused, and must not be dropped.
_STORE_LOCK: Final = "store"
#: A tree's builders' lock is its name with this after it (`materialise`).
BUILD_LOCK: Final = ".build"
#: A temporary build folder older than this is an abandoned build (its daemon died).
STALE_BUILD_S: Final = 3600.0


class BlobCorrupt(DispatchError):
    """A fetched blob's bytes do not match the sha256 the manifest names."""

    code = "blob_corrupt"


@dataclass(frozen=True)
class Made:
    """What `materialise` did: the tree's folder and how many blobs it fetched to make it."""

    path: Path
    fetched: int
    fetched_bytes: int


class BundleCache:
    """Trees by digest under `root`, within `max_bytes` (blobs and trees counted once each)."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.trees = self.root / "trees"
        self.blobs = self.root / "blobs"
        self._locks = self.root / "locks"
        self._tmp = self.root / "tmp"
        for folder in (self.trees, self.blobs, self._locks, self._tmp):
            folder.mkdir(parents=True, exist_ok=True)

    def materialise(self, manifest: Manifest, fetch: Fetch) -> Made:
        """The tree's folder, made now if this box has not got it yet."""
        name = _tree_name(manifest.digest)
        target = self.trees / name
        # Shared first: a tree that is here is taken under the lock running jobs hold (`use`),
        # which an exclusive lock would wait on for as long as any of them runs.
        with self._locked(name, fcntl.LOCK_SH):
            if target.is_dir():
                _touch(target)
                return Made(target, 0, 0)
        # Builders exclude each other on a lock of their own, never on the one warm children
        # hold: a builder that found no tree, while another slot (or daemon) built it and its
        # child took the tree's lock for its whole life, waited for that lock for ever.
        with self._locked(name + BUILD_LOCK, fcntl.LOCK_EX):
            if target.is_dir():
                _touch(target)
                return Made(target, 0, 0)
            self._sweep_builds(name)
            build = Path(tempfile.mkdtemp(prefix=f"{name}.", dir=self._tmp))
            try:
                with self._locked(_STORE_LOCK, fcntl.LOCK_SH):  # no eviction drops a new blob
                    fetched, size = self._lay_out(manifest, build, fetch)
                _seal(build)
                os.rename(build, target)
            except BaseException:
                _remove_tree(build)
                raise
        _touch(target)
        self.evict(keep=name)
        return Made(target, fetched, size)

    @contextlib.contextmanager
    def use(self, digest: str) -> Iterator[Path]:
        """Hold the tree while a job runs from it: eviction passes it by."""
        name = _tree_name(digest)
        with self._locked(name, fcntl.LOCK_SH):
            target = self.trees / name
            if not target.is_dir():
                raise InvalidArgument(f"bundle {digest} is not on this box (materialise it)")
            _touch(target)
            yield target

    def evict(self, keep: str | None = None) -> list[str]:
        """Remove least recently used trees, and blobs no tree links, past the budget."""
        removed: list[str] = []
        with self._locked(_STORE_LOCK, fcntl.LOCK_EX):
            self._evict(keep, removed)
        return removed

    def _evict(self, keep: str | None, removed: list[str]) -> None:
        trees = sorted(
            (p for p in self.trees.iterdir() if p.name != keep),
            key=lambda p: p.stat().st_mtime,
        )
        while self._used_bytes() > self.max_bytes and trees:
            tree = trees.pop(0)
            with self._try_locked(tree.name) as free:
                if free:
                    _remove_tree(tree)
                    removed.append(tree.name)
            self._drop_unlinked_blobs()

    # -- laying a tree out ---------------------------------------------------------------------

    def _lay_out(self, manifest: Manifest, build: Path, fetch: Fetch) -> tuple[int, int]:
        fetched, size = self._fetch_missing(manifest, build, fetch)
        for entry in manifest.entries:
            check_path(entry.path)  # again here: a manifest's checks travel with it, not trust
            dest = build.joinpath(*PurePosixPath(entry.path).parts)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if entry.link is not None:
                _check_link_stays(build, dest, entry.link)
                os.symlink(entry.link, dest)
                continue
            assert entry.sha256 is not None
            blob = self.blobs / entry.sha256
            mode = _READ_ONLY | (entry.mode & _EXEC_BITS)
            if mode == _READ_ONLY:
                os.link(blob, dest)  # one inode for every tree that holds this content
            else:
                shutil.copyfile(blob, dest)
                os.chmod(dest, mode)
        return fetched, size

    def _fetch_missing(self, manifest: Manifest, build: Path, fetch: Fetch) -> tuple[int, int]:
        """Fetch the blobs this box lacks, each checked against its name, into the build's own
        scratch folder; flush them to disk once (one sync, not one fsync per file: 2,000 small
        files cost 0.5 s of fsyncs alone); only then move them into the shared store, so a
        blob there is whole even after a power cut."""
        wanted = {e.sha256: e.size for e in manifest.entries if e.sha256 is not None}
        missing = [sha for sha in wanted if not (self.blobs / sha).exists()]
        if not missing:
            return 0, 0
        scratch = build.with_name(build.name + ".blobs")
        scratch.mkdir()
        try:
            for sha in missing:
                data = fetch(sha)
                if hashlib.sha256(data).hexdigest() != sha:
                    raise BlobCorrupt(f"blob {sha} came back with other bytes (sha256 mismatch)")
                tmp = scratch / sha
                with open(tmp, "xb") as out:
                    out.write(data)
                os.chmod(tmp, _READ_ONLY)
            os.sync()
            for sha in missing:
                os.replace(scratch / sha, self.blobs / sha)  # the same bytes if one raced in
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return len(missing), sum(wanted[sha] for sha in missing)

    # -- locks and housekeeping ------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, name: str, how: int) -> Iterator[None]:
        with open(self._locks / f"{name}.lock", "a+b") as lock:
            fcntl.flock(lock, how)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def _try_locked(self, name: str) -> Iterator[bool]:
        with open(self._locks / f"{name}.lock", "a+b") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _sweep_builds(self, name: str) -> None:
        """Builds left by a daemon that died mid-fetch. One of this tree's is abandoned for
        certain (its builder held the lock held now); any other once it is old."""
        cutoff = time.time() - STALE_BUILD_S
        for leftover in self._tmp.iterdir():
            with contextlib.suppress(FileNotFoundError):
                if leftover.name.startswith(f"{name}.") or leftover.stat().st_mtime < cutoff:
                    _remove_tree(leftover) if leftover.is_dir() else leftover.unlink()

    def _used_bytes(self) -> int:
        """Blob bytes (what trees link) plus executable copies inside trees."""
        total = sum(p.stat().st_size for p in self.blobs.iterdir())
        for tree in self.trees.iterdir():
            for path in tree.rglob("*"):
                info = path.lstat()
                if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
                    total += info.st_size
        return total

    def _drop_unlinked_blobs(self) -> None:
        for blob in self.blobs.iterdir():
            if blob.stat().st_nlink == 1:  # only the blob store holds it now
                with contextlib.suppress(FileNotFoundError):
                    blob.unlink()


def _tree_name(digest: str) -> str:
    algo, _, hexdigest = digest.partition(":")
    if (
        algo != "sha256"
        or len(hexdigest) != 64
        or not all(c in "0123456789abcdef" for c in hexdigest)
    ):
        raise InvalidArgument(f"a bundle digest is 'sha256:' and 64 hex digits, not {digest!r}")
    return hexdigest


def _check_link_stays(build: Path, dest: Path, target: str) -> None:
    resolved = os.path.normpath(os.path.join(dest.parent, target))
    if os.path.isabs(target) or os.path.commonpath([resolved, build]) != str(build):
        raise InvalidArgument(f"symlink {dest.relative_to(build)} -> {target!r} leads out")


def _seal(tree: Path) -> None:
    """Folders read-only too: a job cannot add a file to the shared tree."""
    for folder, _dirs, _files in os.walk(tree, topdown=False):
        os.chmod(folder, 0o555)


def _touch(tree: Path) -> None:
    """The tree's mtime is its last use (eviction's order); the folder is read-only, but its
    owner may still set its times."""
    with contextlib.suppress(FileNotFoundError):
        os.utime(tree)


def _remove_tree(tree: Path) -> None:
    """Remove a tree made read-only: its folders are made writable first."""
    if not tree.exists():
        return
    for folder, _dirs, _files in os.walk(tree):
        with contextlib.suppress(FileNotFoundError):
            os.chmod(folder, 0o755)
    shutil.rmtree(tree, ignore_errors=True)
