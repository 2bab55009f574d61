"""A job's pip requirements as a virtual environment, built once per box and kept.

The daemon side of issue 46's requirements. A job's environment is layered over the daemon's
own: it holds only what the daemon lacks, and a `.pth` file adds the daemon's site folders after
its own (`site.addsitedir`, so the daemon's own `.pth` files, an editable install's included,
work there too), so the box's torch, CUDA wheels and Lakeshore stay exactly as they are.

uv resolves only against what it sees installed in the target environment, and a `.pth` layer
or `--system-site-packages` over a venv'd daemon hides the daemon's packages from it (uv then
fetches numpy again, or fails offline). So the new environment is first given a metadata-only
stub (`<name>-<version>.dist-info/METADATA`) for every distribution the daemon imports, and uv
installs with each pinned `name==version` as a constraint: it resolves the job's requirements
against the daemon's versions as installed and adds only what is missing; a requirement that
needs another version of a daemon package is unsatisfiable and says so. The stubs are removed
afterwards, so the daemon's real metadata is the one a job reads. A requirement that names a
daemon package with a version it excludes is refused before uv runs, naming it.

Once per box: a key's environment is built under an exclusive `flock` on `locks/<key>.lock`, in
`tmp/<key>.<random>/env`, made with `uv venv --relocatable`, and renamed to `envs/<key>` only
once it imports what it must: a daemon killed mid-build leaves a temporary folder that the next
build of that key sweeps away, never an `envs/` entry. Where packages come from is the box's
setting: uv reads the daemon's environment (UV_INDEX_URL, UV_FIND_LINKS, UV_OFFLINE, ...), and
requirement text that carries an option is refused. A failed build is remembered for
`failure_memory_s`, so the next job of that key fails at once with the same words.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from dreamlake.lakeshore.daemon.uvtool import (
    DaemonSite,
    canonical,
    command_line,
    find_uv,
    probe,
    run_logged,
)
from dreamlake.lakeshore.errors import DispatchError, InvalidArgument

__all__ = ["Built", "EnvironmentBuildFailed", "Environments", "RequirementRefused"]

#: The `.pth` file in a job's environment that lays the daemon's site folders under its own.
LAYER_PTH: Final = "_lakeshore_daemon_site.pth"
#: URL schemes a requirement may name (`name @ URL`): a file on this box is not the job's.
_URL_SCHEMES: Final = ("http", "https", "git+https", "git+http", "git+ssh", "git+git")
#: What a finished environment's python must import, and its prefix, for it to be used.
_VERIFY: Final = "import sys, dreamlake.lakeshore, cloudpickle; print(sys.prefix)"


class EnvironmentBuildFailed(DispatchError):
    """uv could not build a job's environment: the job ends `failed`, `ended_by: runtime`."""

    code = "environment_build_failed"
    ended_by = "runtime"

    def __init__(self, message: str, *, command: str, tail: Sequence[str]) -> None:
        super().__init__(message)
        #: The failing command line, credentials in URLs masked.
        self.command = command
        #: The last lines of its output (at most 50), masked the same way.
        self.tail = list(tail)


class RequirementRefused(InvalidArgument):
    """A requirement this box will not build: an option, a local path, or one that would
    replace a package of the daemon's own environment."""

    ended_by = "runtime"


@dataclass(frozen=True)
class Built:
    """A job's environment: its interpreter, its key, whether this call built it, and how long
    the call took (a wait on another builder's lock included)."""

    python: Path
    key: str
    built: bool
    seconds: float


@dataclass
class Stats:
    """Counters the daemon's metrics export: cache hits, misses (builds run, failed ones
    too), failed builds, uv runs, and the seconds spent building (waits for a lock excluded)."""

    hits: int = 0
    misses: int = 0
    failures: int = 0
    uv_runs: int = 0
    build_seconds: float = 0.0


@dataclass
class _Failure:
    error: EnvironmentBuildFailed
    until: float


class Environments:
    """Job environments by key under `root` (`envs/`, `locks/`, `tmp/`, uv's cache).

    `python` is the daemon's interpreter, the one a job's environment is layered over; `uv`
    the uv binary (found when first needed: the `uv` package, then PATH), a seam for tests.
    """

    def __init__(
        self,
        root: Path,
        *,
        python: str = sys.executable,
        failure_memory_s: float = 300.0,
        uv: str | None = None,
    ) -> None:
        self.root = Path(root).absolute()
        self.python = python
        self.failure_memory_s = failure_memory_s
        self.uv = uv
        #: Hits, misses, failures, uv runs and build seconds, for the daemon's metrics.
        self.stats = Stats()
        self._site: DaemonSite | None = None
        self._failures: dict[str, _Failure] = {}
        self._guard = threading.Lock()

    @property
    def site(self) -> DaemonSite:
        """The daemon's interpreter and what it has installed, read once."""
        with self._guard:
            if self._site is None:
                self._site = probe(self.python)
            return self._site

    def key(self, requirements: Sequence[str]) -> str:
        """sha256 of the requirements (parsed, normalised, sorted), the Python minor version,
        the platform, and the daemon's installed set that the environment is layered on."""
        normalised = sorted(str(req) for req in self._parse(requirements))
        site = self.site
        base = sorted(f"{d.key}=={d.version}" for d in site.installed.values())
        text = json.dumps(
            {
                "requirements": normalised,
                "python": f"{site.implementation}{site.version}",
                "platform": site.platform,
                "daemon": {"site": list(site.site), "installed": base},
            },
            sort_keys=True,
        )
        return hashlib.sha256(text.encode()).hexdigest()

    def ensure(
        self, requirements: Sequence[str], *, on_progress: Callable[[str], None] | None = None
    ) -> Built:
        """The environment for `requirements`, built now if this box has not got it."""
        started = time.monotonic()
        parsed = self._parse(requirements)
        self._refuse_replacements(parsed)
        key = self.key(requirements)
        target = self.root / "envs" / key
        if not target.is_dir():  # made by a rename: a folder there is whole
            self._raise_remembered(key)
            with self._locked(key):
                if not target.is_dir():  # not built while this call waited for the lock
                    self._raise_remembered(key)
                    self._build_counted(key, parsed, target, on_progress)
                    return Built(_python_of(target), key, True, time.monotonic() - started)
        with self._guard:
            self.stats.hits += 1
        return Built(_python_of(target), key, False, time.monotonic() - started)

    # -- checking requirements ---------------------------------------------------------------

    def _parse(self, requirements: Sequence[str]) -> list[Requirement]:
        if isinstance(requirements, str) or not all(isinstance(r, str) for r in requirements):
            raise RequirementRefused(
                f"requirements must be a list of requirement strings, not {requirements!r}"
            )
        return [_parse_one(text) for text in requirements]

    def _refuse_replacements(self, requirements: Sequence[Requirement]) -> None:
        installed = self.site.installed
        for req in requirements:
            have = installed.get(canonical(req.name))
            if have is None or (req.marker is not None and not req.marker.evaluate()):
                continue
            if req.url is not None or not req.specifier.contains(have.version, prereleases=True):
                raise RequirementRefused(
                    f"{req} would replace the daemon's {have.name} {have.version}; a job's "
                    "requirements may add packages, not replace the box's"
                )

    def _raise_remembered(self, key: str) -> None:
        with self._guard:
            failure = self._failures.get(key)
            if failure is not None and time.monotonic() < failure.until:
                raise failure.error
            self._failures.pop(key, None)

    # -- building ----------------------------------------------------------------------------

    def _build_counted(
        self,
        key: str,
        requirements: Sequence[Requirement],
        target: Path,
        on_progress: Callable[[str], None] | None,
    ) -> None:
        building = time.monotonic()
        try:
            self._build(key, requirements, target, on_progress)
        finally:
            with self._guard:
                self.stats.misses += 1
                self.stats.build_seconds += time.monotonic() - building

    def _build(
        self,
        key: str,
        requirements: Sequence[Requirement],
        target: Path,
        on_progress: Callable[[str], None] | None,
    ) -> None:
        tmp_root = self.root / "tmp"
        tmp_root.mkdir(parents=True, exist_ok=True)
        self._sweep(key)
        build = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=tmp_root))
        try:
            env = build / "env"
            self._uv(key, ["venv", "--relocatable", "--python", self.python, str(env)], on_progress)
            site_packages = _site_packages(env)
            stubs = _write_stubs(self.site, site_packages)
            constraints = build / "constraints.txt"
            constraints.write_text(
                "".join(
                    f"{d.name}=={d.version}\n"
                    for d in self.site.installed.values()
                    if _is_pep440(d.version)
                )
            )
            wanted = build / "requirements.txt"
            wanted.write_text("".join(f"{req}\n" for req in requirements))
            python = str(_python_of(env))
            install = ["pip", "install", "--python", python, "-c", str(constraints)]
            self._uv(key, [*install, "-r", str(wanted)], on_progress)
            self._unstub(stubs)
            (site_packages / LAYER_PTH).write_text(
                "".join(f"import site; site.addsitedir({folder!r})\n" for folder in self.site.site)
            )
            self._verify(key, env, on_progress)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(env, target)
        finally:
            shutil.rmtree(build, ignore_errors=True)

    def _uv(self, key: str, args: list[str], on_progress: Callable[[str], None] | None) -> None:
        command = [self.uv or find_uv(), *args]
        line = command_line(command)
        if on_progress is not None:
            on_progress(f"environment {key[:12]}: {line}")
        with self._guard:
            self.stats.uv_runs += 1
        code, tail = run_logged(command, self._uv_env(), on_progress)
        if code != 0:
            self._fail(key, f"uv exited {code} building environment {key[:12]}", line, tail)

    def _uv_env(self) -> dict[str, str]:
        """The daemon's environment as uv reads it (the box's index settings), with uv's cache
        kept under `root` unless the box names one, and no venv of the daemon's in the way."""
        env = dict(os.environ)
        env.setdefault("UV_CACHE_DIR", str(self.root / "uv-cache"))
        env.pop("VIRTUAL_ENV", None)
        env["UV_PYTHON_DOWNLOADS"] = "never"
        return env

    def _unstub(self, stubs: Sequence[tuple[Path, str]]) -> None:
        for folder, name in stubs:
            if not (folder / "METADATA").is_file():  # uv removed it: it replaced the package
                raise RequirementRefused(
                    f"the requirements would replace the daemon's {name}; a job's requirements "
                    "may add packages, not replace the box's"
                )
            shutil.rmtree(folder)

    def _verify(self, key: str, env: Path, on_progress: Callable[[str], None] | None) -> None:
        command = [str(_python_of(env)), "-c", _VERIFY]
        code, tail = run_logged(command, {k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        if code != 0 or not tail or Path(tail[-1]) != env:
            self._fail(
                key,
                f"environment {key[:12]} does not import Lakeshore",
                command_line(command),
                tail,
            )
        if on_progress is not None:
            on_progress(f"environment {key[:12]}: ready")

    def _fail(self, key: str, message: str, command: str, tail: Sequence[str]) -> None:
        error = EnvironmentBuildFailed(f"{message}: {_said(tail)}", command=command, tail=tail)
        with self._guard:
            self._failures[key] = _Failure(error, time.monotonic() + self.failure_memory_s)
            self.stats.failures += 1
        raise error

    # -- locks and housekeeping --------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        with open(locks / f"{key}.lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _sweep(self, key: str) -> None:
        """Builds left by a daemon that died mid-build: this key's, whose lock is held now, and
        any other key's whose lock is free (nobody is building it)."""
        for leftover in (self.root / "tmp").iterdir():
            owner = leftover.name.split(".", 1)[0]
            if owner == key:
                shutil.rmtree(leftover, ignore_errors=True)
                continue
            with open(self.root / "locks" / f"{owner}.lock", "a+b") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # being built now
                try:
                    shutil.rmtree(leftover, ignore_errors=True)
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)


def _parse_one(text: str) -> Requirement:
    line = text.strip()
    if line.startswith("-"):
        raise RequirementRefused(
            f"requirement {line[:200]!r} is an option: where packages come from (index URLs, "
            "find-links) is the worker box's setting, and includes are resolved at submit; "
            "give requirement strings only"
        )
    try:
        req = Requirement(line)
    except InvalidRequirement:
        raise RequirementRefused(
            f"requirement {line[:200]!r} is neither a PEP 508 requirement ('name>=1.2', "
            "'name[extra]', 'name @ https://...') nor a URL; a local file path is not taken"
        ) from None
    if req.url is not None and urlsplit(req.url).scheme not in _URL_SCHEMES:
        raise RequirementRefused(
            f"requirement {line[:200]!r} names {urlsplit(req.url).scheme or 'a local'} URL; "
            f"only {', '.join(_URL_SCHEMES)} URLs are taken (a file on the box is not the job's)"
        )
    return req


def _said(tail: Sequence[str]) -> str:
    """uv's error as one line: from its last `error:` line on (uv wraps its explanation over
    several), else the last line it printed."""
    starts = [i for i, line in enumerate(tail) if line.startswith("error:")]
    lines = tail[starts[-1] :] if starts else [line for line in tail if line.strip()][-1:]
    return " ".join(line.strip() for line in lines)[:2000]


def _is_pep440(version: str) -> bool:
    """Whether uv can read `name==version` as a constraint; a distribution whose version it
    cannot is still stubbed, and the check of the stubs after the install protects it."""
    try:
        Version(version)
    except InvalidVersion:
        return False
    return True


def _python_of(env: Path) -> Path:
    return env / "bin" / "python"


def _site_packages(env: Path) -> Path:
    found = sorted(env.glob("lib/python*/site-packages"))
    if not found:
        raise DispatchError(f"uv venv made no site-packages under {env}")
    return found[0]


def _write_stubs(site: DaemonSite, site_packages: Path) -> list[tuple[Path, str]]:
    """A metadata-only `.dist-info` per daemon distribution, so uv sees it installed."""
    stubs = []
    for dist in site.installed.values():
        folder = site_packages / f"{dist.name.replace('-', '_')}-{dist.version}.dist-info"
        folder.mkdir(exist_ok=True)
        (folder / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {dist.name}\nVersion: {dist.version}\n"
        )
        stubs.append((folder, f"{dist.name} {dist.version}"))
    return stubs
