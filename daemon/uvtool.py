"""The uv binary and the daemon's own Python, as an environment build sees them.

Kept apart from the cache (environments.py) because this is the part that talks to other
programs: which uv to run, what the daemon's interpreter has installed (asked of that
interpreter itself, so a daemon run under another Python than the one building is described
right), and running uv with its output kept for the error a failed build carries, with any
credential in a URL masked before it reaches a log or a job's row.
"""

from __future__ import annotations

import collections
import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from dreamlake.lakeshore.errors import DispatchError

__all__ = [
    "DaemonSite",
    "Installed",
    "UvMissing",
    "canonical",
    "command_line",
    "find_uv",
    "mask",
    "probe",
    "run_logged",
]

#: Lines of uv's output a failed build keeps.
TAIL_LINES: Final = 50
_CREDENTIALS: Final = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")


class UvMissing(DispatchError):
    """Neither the `uv` package nor a `uv` on PATH: the daemon cannot build environments."""

    code = "uv_missing"


def find_uv() -> str:
    """uv from the daemon extra's `uv` package, else the one on PATH."""
    try:
        import uv  # type: ignore[import-untyped,unused-ignore]

        found = str(uv.find_uv_bin())
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv") or ""
    if not found:
        raise UvMissing(
            "uv is not installed for the daemon: install 'dreamlake-lakeshore[daemon]' "
            "(it brings uv) or put a uv on PATH; a job with requirements needs it"
        )
    return found


def canonical(name: str) -> str:
    """A distribution's name as packaging compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def mask(text: str) -> str:
    """`https://user:token@host` as `https://***@host`."""
    return _CREDENTIALS.sub(lambda m: f"{m.group('scheme')}***@", text)


@dataclass(frozen=True)
class Installed:
    """One distribution the daemon imports (an editable install or a local build too: its
    stub in a new environment is a plain installed distribution to uv)."""

    name: str
    version: str

    @property
    def key(self) -> str:
        return canonical(self.name)


@dataclass(frozen=True)
class DaemonSite:
    """What a job's environment is layered over: the interpreter, its site folders (in the
    order it reads them) and every distribution it imports from them."""

    python: str
    version: str
    implementation: str
    platform: str
    site: tuple[str, ...]
    installed: Mapping[str, Installed]


_PROBE: Final = r"""
import importlib.metadata as m, json, re, site, sys, sysconfig
dirs = site.getsitepackages()
seen = {}
for d in m.distributions(path=dirs):
    name = d.metadata["Name"]
    if not name:
        continue
    key = re.sub(r"[-_.]+", "-", name).lower()
    if key in seen:
        continue
    seen[key] = {"name": name, "version": d.version}
print(json.dumps({"version": "%d.%d" % sys.version_info[:2], "site": dirs,
    "implementation": sys.implementation.name, "platform": sysconfig.get_platform(),
    "installed": list(seen.values())}))
"""


def probe(python: str) -> DaemonSite:
    """Ask `python` (isolated: no PYTHONPATH, no user site) what it has installed."""
    done = subprocess.run(
        [python, "-I", "-c", _PROBE], capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        raise DispatchError(
            f"could not read the packages of the daemon's Python {python}: "
            f"{done.stderr.strip()[-2000:]}"
        )
    data = json.loads(done.stdout)
    installed = [Installed(**item) for item in data["installed"]]
    return DaemonSite(
        python=python,
        version=data["version"],
        implementation=data["implementation"],
        platform=data["platform"],
        site=tuple(data["site"]),
        installed={dist.key: dist for dist in installed},
    )


def run_logged(
    command: Sequence[str],
    env: Mapping[str, str],
    on_line: Callable[[str], None] | None = None,
) -> tuple[int, list[str]]:
    """Run uv (or a new environment's python), passing each output line on, masked, as it
    comes; its exit code and the last `TAIL_LINES` lines of stdout and stderr together."""
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    with subprocess.Popen(
        list(command),
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    ) as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = mask(raw.rstrip("\n"))
            tail.append(line)
            if on_line is not None:
                on_line(line)
        code = proc.wait()
    return code, list(tail)


def command_line(command: Sequence[str]) -> str:
    """The command as a shell would read it, credentials masked."""
    return mask(shlex.join(command))
