"""A claimed job's runtime made ready on this box: its bundle laid out, its environment built.

A claim's `runtime` (issue 46) names a bundle by digest and lists requirements. Before the job's
child may start, the bundle is fetched from the plane into the box's cache (bundles.py, once per
box whatever the number of slots or daemons) and the requirements are built into an environment
(environments.py, once per box per key). What the child needs is then a few paths: the tree's
`python/` part for `sys.path`, the environment's interpreter, and for a job that shipped a
working directory a fresh folder of its own laid over the read-only tree.

A warm child imports the code of the jobs it runs, so it may run only jobs of one runtime: the
runtime's `key` is what the slot compares (a child that has run nothing may take any runtime of
its interpreter). Whatever goes wrong here is the job's (`RuntimeFailed`, ended with cause
`runtime` and not retried: the same runtime would fail again), never the daemon's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

from dreamlake.lakeshore.errors import DispatchError
from dreamlake.lakeshore.plane.waiting import through_outages
from dreamlake.lakeshore.runtime.bundle import PYTHON, WORKDIR
from dreamlake.lakeshore.runtime.manifest import Manifest

from .bundles import BundleCache

if TYPE_CHECKING:
    from .environments import Environments

__all__ = ["DEFAULT_CACHE_GB", "JobRuntimes", "Ready", "RuntimeFailed", "runtime_key"]

#: `--runtime-cache-gb`: how much the box keeps of shipped trees.
DEFAULT_CACHE_GB: Final = 20.0
#: How long a fetch of a job's bundle rides out an unreachable plane before the job fails.
FETCH_OUTAGE_S: Final = 60.0

T = TypeVar("T")


class RuntimeFailed(DispatchError):
    """The job's runtime could not be made on this box: its bundle could not be fetched or
    laid out, or its environment could not be built."""

    code = "runtime_failed"


def runtime_key(spec: Mapping[str, Any] | None) -> str | None:
    """What a warm child must have adopted to run a job of `spec`: None for a job that brings
    nothing (any child of the daemon's own that has adopted nothing may run it)."""
    if not spec:
        return None
    chosen = {
        "bundle": spec.get("bundle"),
        "requirements": spec.get("requirements") or [],
        "env": spec.get("env") or {},
        "workdir": bool(spec.get("workdir")),
    }
    text = json.dumps(chosen, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Ready:
    """A runtime made ready: what a child needs to run its jobs."""

    key: str
    #: The bundle's tree on this box; None: no bundle.
    tree: Path | None = None
    #: The environment's interpreter; None: the daemon's own.
    python: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    #: A working directory ships: each job gets its own folder over `tree/workdir`.
    workdir: bool = False
    #: What the making took: blobs fetched, bytes, whether an environment was built, seconds.
    fetched: int = 0
    fetched_bytes: int = 0
    built: bool = False
    seconds: float = 0.0

    @property
    def sys_path(self) -> tuple[str, ...]:
        """Entries the child puts first on `sys.path` (after a job's own working directory)."""
        if self.tree is None or not (self.tree / PYTHON).is_dir():
            return ()
        return (str(self.tree / PYTHON),)


class JobRuntimes:
    """The box's runtimes, under `<root>`: trees, environments, and the jobs' own folders."""

    def __init__(
        self,
        plane: Any,
        root: Path,
        *,
        cache_bytes: int = int(DEFAULT_CACHE_GB * (1 << 30)),
        environments: Callable[[], Environments] | None = None,
    ) -> None:
        self.plane = plane
        self.root = Path(root)
        self.bundles = BundleCache(self.root / "bundles", cache_bytes)
        self.jobs = self.root / "jobs"
        self.jobs.mkdir(parents=True, exist_ok=True)
        self._environments = environments
        self._envs: Environments | None = None
        self.stats = {"bundle_hits": 0, "bundle_misses": 0, "bytes_fetched": 0}

    def ready(
        self, spec: Mapping[str, Any], *, on_progress: Callable[[str], None] | None = None
    ) -> Ready:
        """Fetch and build what `spec` needs (blocking: minutes for a cold environment);
        `on_progress` hears each step of a build (preparing.py)."""
        key = runtime_key(spec)
        assert key is not None
        started = time.monotonic()
        tree, fetched, fetched_bytes = self._tree(spec.get("bundle"))
        python, built = self._python(list(spec.get("requirements") or []), on_progress)
        return Ready(
            key,
            tree=tree,
            python=python,
            env=dict(spec.get("env") or {}),
            workdir=bool(spec.get("workdir")) and tree is not None,
            fetched=fetched,
            fetched_bytes=fetched_bytes,
            built=built,
            seconds=time.monotonic() - started,
        )

    def figures(self) -> dict[str, float]:
        """The box's runtime counters, for the daemon's metrics (read when scraped)."""
        envs = self._envs.stats if self._envs is not None else None
        return {
            "bundle_hits": self.stats["bundle_hits"],
            "bundle_misses": self.stats["bundle_misses"],
            "bundle_bytes_fetched": self.stats["bytes_fetched"],
            "environment_hits": envs.hits if envs else 0,
            "environment_misses": envs.misses if envs else 0,
            "environment_failures": envs.failures if envs else 0,
            "environment_build_seconds": envs.build_seconds if envs else 0.0,
        }

    @contextlib.contextmanager
    def hold(self, ready: Ready) -> Iterator[None]:
        """Keep `ready`'s tree on the box while a child runs from it (eviction passes it by)."""
        if ready.tree is None:
            yield
            return
        with self.bundles.use(_digest_of(ready.tree)):
            yield

    def job_folder(self, ready: Ready, inv_id: str, attempt: int) -> Path | None:
        """A fresh, writable working directory for one attempt, whose entries are links into
        the read-only tree's `workdir/`: the job reads its files where it expects them and
        writes new ones beside them, never into the tree other jobs share."""
        if not ready.workdir or ready.tree is None:
            return None
        folder = self.jobs / f"{inv_id}-{attempt}"
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        shipped = ready.tree / WORKDIR
        for entry in os.scandir(shipped):
            os.symlink(entry.path, folder / entry.name)
        return folder

    def drop_job_folder(self, folder: Path | None) -> None:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

    # -- the parts -----------------------------------------------------------------------------

    def _tree(self, digest: Any) -> tuple[Path | None, int, int]:
        if not digest:
            return None, 0, 0
        try:
            wire = self._read(lambda: self.plane.runtime_manifest(str(digest)), "its manifest")
            manifest = Manifest.from_wire(wire)
            if manifest.digest != digest:
                raise RuntimeFailed(f"the plane's manifest for {digest} is {manifest.digest}")
            made = self.bundles.materialise(
                manifest, lambda sha: self._read(lambda: self.plane.runtime_blob(sha), "a blob")
            )
        except DispatchError as exc:
            if isinstance(exc, RuntimeFailed):
                raise
            raise RuntimeFailed(
                f"the job's code (bundle {digest}) could not be fetched: {exc}"
            ) from exc
        except OSError as exc:
            raise RuntimeFailed(
                f"the job's code (bundle {digest}) could not be laid out: {exc}"
            ) from exc
        self.stats["bundle_misses" if made.fetched else "bundle_hits"] += 1
        self.stats["bytes_fetched"] += made.fetched_bytes
        return made.path, made.fetched, made.fetched_bytes

    def _read(self, call: Callable[[], T], what: str) -> T:
        """A read of the job's bundle, made again through a plane outage (a read by name is
        safe to repeat): a connection reset mid-fetch is not a job whose code cannot exist."""
        return through_outages(call, FETCH_OUTAGE_S, what=f"fetching the job's code ({what})")

    def _python(
        self, requirements: list[str], on_progress: Callable[[str], None] | None = None
    ) -> tuple[str | None, bool]:
        if not requirements:
            return None, False
        if self._environments is None:
            raise RuntimeFailed(
                "the job has requirements, and this daemon builds no environments "
                "(install the daemon extra: pip install 'dreamlake-lakeshore[daemon]')"
            )
        if self._envs is None:
            self._envs = self._environments()
        try:
            built = self._envs.ensure(requirements, on_progress=on_progress)
        except DispatchError as exc:
            raise RuntimeFailed(str(exc)) from exc
        return str(built.python), built.built


def _digest_of(tree: Path) -> str:
    """The digest a tree's folder is named for (bundles.py names it by the bare hex)."""
    return f"sha256:{tree.name}"
