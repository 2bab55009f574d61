"""The daemon's bundle cache (issue 46): a shipped tree is fetched once per box, blob by blob,
laid out read-only and renamed into place whole; concurrent builds of one tree fetch it once;
a build killed mid-fetch leaves nothing a job could use; eviction spares trees in use."""

from __future__ import annotations

import fcntl
import hashlib
import multiprocessing
import os
import signal
import stat
import threading
import time
import uuid
from pathlib import Path

import pytest

from dreamlake.lakeshore.daemon.bundles import BlobCorrupt, BundleCache
from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.runtime import Entry, Manifest, scan


class Blobs:
    """A plane's blob store stand-in on disk, counting each fetch in a folder (so that fetches
    from several processes add up)."""

    def __init__(self, root: Path) -> None:
        self.store, self.log = root / "store", root / "fetched"
        self.store.mkdir(parents=True, exist_ok=True)
        self.log.mkdir(exist_ok=True)

    def add_tree(self, folder: Path) -> Manifest:
        manifest = scan(folder)
        for entry in manifest.entries:
            if entry.sha256:
                (self.store / entry.sha256).write_bytes((folder / entry.path).read_bytes())
        return manifest

    def fetch(self, sha256: str) -> bytes:
        (self.log / f"{sha256}.{uuid.uuid4().hex}").touch()
        return (self.store / sha256).read_bytes()

    def fetched(self) -> int:
        return len(list(self.log.iterdir()))


def tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def project(root: Path, n: int = 30) -> Path:
    files = {f"myproj/m{i}.py": f"VALUE = {i}\n" for i in range(n)}
    files["myproj/__init__.py"] = ""
    files["train.py"] = "print('train')\n"
    path = tree(root, files)
    os.chmod(path / "train.py", 0o755)
    os.symlink("myproj", path / "alias")
    return path


def test_a_tree_is_laid_out_read_only_once_and_then_reused(tmp_path: Path) -> None:
    blobs = Blobs(tmp_path / "plane")
    manifest = blobs.add_tree(project(tmp_path / "producer"))
    cache = BundleCache(tmp_path / "box", max_bytes=1 << 30)

    made = cache.materialise(manifest, blobs.fetch)
    assert (made.fetched, blobs.fetched()) == (32, 32)
    assert (made.path / "myproj" / "m7.py").read_text() == "VALUE = 7\n"
    assert os.readlink(made.path / "alias") == "myproj"
    modes = {
        p.name: stat.S_IMODE(p.lstat().st_mode) for p in made.path.rglob("*") if not p.is_symlink()
    }
    assert modes["train.py"] == 0o555 and modes["m7.py"] == 0o444 and modes["myproj"] == 0o555

    again = cache.materialise(manifest, blobs.fetch)
    assert (again.path, again.fetched, blobs.fetched()) == (made.path, 0, 32)


def test_a_tree_in_use_is_handed_to_the_next_job_at_once(tmp_path: Path) -> None:
    """A warm child holds its tree (`use`) for as long as it lives; the next job of the same
    bundle must get the tree without waiting for that child to go."""
    blobs = Blobs(tmp_path / "plane")
    manifest = blobs.add_tree(project(tmp_path / "producer"))
    cache = BundleCache(tmp_path / "box", max_bytes=1 << 30)
    made = cache.materialise(manifest, blobs.fetch)
    with cache.use(manifest.digest):
        done: list[Path] = []
        worker = threading.Thread(
            target=lambda: done.append(cache.materialise(manifest, blobs.fetch).path), daemon=True
        )
        worker.start()
        worker.join(10)
        assert done == [made.path], "materialise waited on the lock a running job holds"


def test_a_build_never_waits_on_the_lock_a_warm_child_holds(tmp_path: Path) -> None:
    """Two slots take a job of one bundle at once: both find no tree; one builds it, and its
    warm child holds the tree's lock for its life. The other, now building, must not wait for
    that lock (issue 46's cache waited for ever, and its slot never ran a job again: caught by
    the network faults, two daemons of two slots on one bundle). Here the holder takes the
    tree's lock before the tree exists, where the late builder stood."""
    blobs = Blobs(tmp_path / "plane")
    manifest = blobs.add_tree(project(tmp_path / "producer"))
    cache = BundleCache(tmp_path / "box", max_bytes=1 << 30)
    name = manifest.digest.partition(":")[2]  # the tree's name, and its lock's
    with cache._locked(name, fcntl.LOCK_SH):  # what `use` takes, held as a warm child holds it
        done: list[Path] = []
        worker = threading.Thread(
            target=lambda: done.append(cache.materialise(manifest, blobs.fetch).path), daemon=True
        )
        worker.start()
        worker.join(10)
        assert done, "the build waited on the lock a warm child holds"
    assert (done[0] / "myproj" / "m7.py").read_text() == "VALUE = 7\n"


def test_an_edit_of_one_file_fetches_that_one_blob(tmp_path: Path) -> None:
    blobs = Blobs(tmp_path / "plane")
    producer = project(tmp_path / "producer")
    cache = BundleCache(tmp_path / "box", max_bytes=1 << 30)
    first = cache.materialise(blobs.add_tree(producer), blobs.fetch)
    (producer / "myproj" / "m3.py").write_text("VALUE = 'edited'\n")
    second = cache.materialise(blobs.add_tree(producer), blobs.fetch)
    assert second.path != first.path and second.fetched == 1
    assert (second.path / "myproj" / "m3.py").read_text() == "VALUE = 'edited'\n"
    assert (first.path / "myproj" / "m3.py").read_text() == "VALUE = 3\n"  # untouched


def _build(cache_root: str, blobs_root: str, manifest_wire: dict[str, object]) -> None:
    blobs = Blobs(Path(blobs_root))
    BundleCache(Path(cache_root), 1 << 30).materialise(
        Manifest.from_wire(manifest_wire), blobs.fetch
    )


def test_eight_processes_building_one_tree_at_once_fetch_it_once(tmp_path: Path) -> None:
    blobs = Blobs(tmp_path / "plane")
    manifest = blobs.add_tree(project(tmp_path / "producer"))
    ctx = multiprocessing.get_context("spawn")
    args = (str(tmp_path / "box"), str(tmp_path / "plane"), manifest.to_wire())
    procs = [ctx.Process(target=_build, args=args) for _ in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert blobs.fetched() == 32  # each blob once, whichever process won the lock
    assert len(list((tmp_path / "box" / "trees").iterdir())) == 1


def _build_and_hang(
    cache_root: str, store: str, manifest_wire: dict[str, object], marker: str
) -> None:
    """Fetches a few blobs, then never returns from the next fetch (until killed)."""
    calls = []

    def fetch(sha256: str) -> bytes:
        calls.append(sha256)
        if len(calls) == 5:
            Path(marker).touch()
            time.sleep(3600)
        return (Path(store) / sha256).read_bytes()

    BundleCache(Path(cache_root), 1 << 30).materialise(Manifest.from_wire(manifest_wire), fetch)


def test_a_build_killed_mid_fetch_leaves_nothing_used_and_the_next_one_is_whole(
    tmp_path: Path,
) -> None:
    blobs = Blobs(tmp_path / "plane")
    manifest = blobs.add_tree(project(tmp_path / "producer"))
    marker = tmp_path / "mid-fetch"
    ctx = multiprocessing.get_context("spawn")
    proc = ctx.Process(
        target=_build_and_hang,
        args=(str(tmp_path / "box"), str(blobs.store), manifest.to_wire(), str(marker)),
    )
    proc.start()
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert time.monotonic() < deadline and proc.is_alive(), "the build never got going"
        time.sleep(0.02)
    os.kill(proc.pid or 0, signal.SIGKILL)
    proc.join(30)
    cache = BundleCache(tmp_path / "box", max_bytes=1 << 30)
    assert list(cache.trees.iterdir()) == []  # no tree under its name, half made or not

    made = cache.materialise(manifest, blobs.fetch)
    # what the killed build had fetched was never flushed and moved into the store: fetched
    # again, never trusted
    assert made.fetched == 32
    assert sorted(p.name for p in (tmp_path / "box" / "tmp").iterdir()) == []
    assert all((made.path / e.path).exists() or e.link for e in manifest.entries)


def test_a_blob_with_other_bytes_is_refused_and_no_tree_is_made(tmp_path: Path) -> None:
    blobs = Blobs(tmp_path / "plane")
    manifest = blobs.add_tree(tree(tmp_path / "producer", {"a.py": "a = 1\n"}))
    (sha,) = manifest.blobs()
    (blobs.store / sha).write_text("a = 'tampered'\n")
    cache = BundleCache(tmp_path / "box", max_bytes=1 << 30)
    with pytest.raises(BlobCorrupt, match=f"blob {sha} came back with other bytes"):
        cache.materialise(manifest, blobs.fetch)
    assert list(cache.trees.iterdir()) == [] and list(cache.blobs.iterdir()) == []


@pytest.mark.parametrize(
    "entry",
    [
        Entry("../outside.py", 0o644, 1, sha256=hashlib.sha256(b"x").hexdigest()),
        Entry("/tmp/outside.py", 0o644, 1, sha256=hashlib.sha256(b"x").hexdigest()),
        Entry("a/up", 0o777, 0, link="../../outside"),
    ],
)
def test_an_entry_leading_out_of_the_tree_writes_nothing_outside(
    tmp_path: Path, entry: Entry
) -> None:
    # a manifest made by hand, not by scan (a raw HTTP producer): checked again here
    cache = BundleCache(tmp_path / "box", max_bytes=1 << 30)
    before = set(tmp_path.rglob("*"))
    with pytest.raises(InvalidArgument):
        cache.materialise(Manifest((entry,)), lambda sha: b"x")
    assert {p for p in set(tmp_path.rglob("*")) - before if "box" not in p.parts} == set()
    assert list(cache.trees.iterdir()) == []


def test_eviction_drops_the_least_recently_used_tree_but_never_one_in_use(tmp_path: Path) -> None:
    blobs = Blobs(tmp_path / "plane")
    sizes = 200_000
    manifests = [
        blobs.add_tree(tree(tmp_path / f"p{i}", {"w.bin": str(i) * sizes})) for i in range(3)
    ]
    cache = BundleCache(tmp_path / "box", max_bytes=int(2.5 * sizes))
    made = [cache.materialise(m, blobs.fetch) for m in manifests[:2]]
    os.utime(made[1].path, (time.time() - 100, time.time() - 100))  # p1 is the least recent
    with cache.use(manifests[1].digest):
        cache.materialise(manifests[2], blobs.fetch)  # over budget: p1 is held, p0 goes
        assert made[1].path.is_dir() and not made[0].path.exists()
    # within the budget again (two trees): nothing more goes
    assert cache.evict() == []
    assert {p.name for p in cache.trees.iterdir()} == {
        made[1].path.name,
        manifests[2].digest.removeprefix("sha256:"),
    }
