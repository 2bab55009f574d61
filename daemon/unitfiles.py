"""The systemd units Lakeshore ships, read from the installed package and fitted to one box.

The units live in the repository's `systemd/` folder, the package `dreamlake.lakeshore.systemd`
in the wheel (`*.service`, package data), so that `pip install
'dreamlake-lakeshore[daemon]'` on a GPU box brings them: `lakeshore systemd install` writes
them, with their EnvironmentFiles, where systemd reads them. As shipped they run the scripts
of a virtualenv in /opt/lakeshore and read settings from /etc/lakeshore; `render` points both
at where this box keeps them (by default, the environment running the command).

Nothing here imports the daemon's extra: the control host installs the server's unit with the
base package and the `server` extra only.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Final

from dreamlake.lakeshore.errors import InvalidArgument

#: The package that holds the unit files (the repository's `systemd/` folder).
UNITS_PACKAGE: Final = "dreamlake.lakeshore.systemd"
#: The unit file of each process, by the name `lakeshore systemd` uses for it.
UNITS: Final = {
    "daemon": "lakeshore-daemon@.service",
    "server": "lakeshore-server.service",
    "controller": "lakeshore-controller.service",
}
#: Where the shipped units expect the scripts and the settings; `render` replaces both.
SHIPPED_BIN_DIR: Final = "/opt/lakeshore/bin"
SHIPPED_ENV_DIR: Final = "/etc/lakeshore"
#: Where systemd reads units an administrator installed.
SYSTEM_UNIT_DIR: Final = "/etc/systemd/system"
#: The account the units run as (User= / Group=).
SERVICE_USER: Final = "lakeshore"
#: The file every unit reads first: how the processes of this box reach their plane.
SHARED_ENV: Final = "lakeshore.env"
#: Units and templates are world-readable; an EnvironmentFile may hold a token or a password.
UNIT_MODE: Final = 0o644
ENV_MODE: Final = 0o600


def shipped(kind: str) -> str:
    """The unit as the package ships it (`kind`: daemon, server or controller)."""
    if kind not in UNITS:
        raise InvalidArgument(f"unknown unit {kind!r}; use {'|'.join(UNITS)}")
    return resources.files(UNITS_PACKAGE).joinpath(UNITS[kind]).read_text()


def default_bin_dir() -> str:
    """The folder holding this installation's console scripts, so that an installed unit runs
    the Lakeshore that installed it; the shipped /opt/lakeshore/bin when none can be found."""
    here = Path(sys.executable).parent  # not resolved: a virtualenv's bin/ holds symlinks
    if (here / "lakeshore-daemon").exists():
        return str(here)
    found = shutil.which("lakeshore-daemon")
    return str(Path(found).parent) if found else SHIPPED_BIN_DIR


def render(kind: str, *, bin_dir: str = SHIPPED_BIN_DIR, env_dir: str = SHIPPED_ENV_DIR) -> str:
    """The unit with its ExecStart scripts under `bin_dir` and its EnvironmentFiles (and the
    comments naming them) under `env_dir`."""
    text = shipped(kind)
    for old, new in ((SHIPPED_BIN_DIR, bin_dir), (SHIPPED_ENV_DIR, env_dir)):
        new = new.rstrip("/")
        if not new.startswith("/") or any(c.isspace() for c in new):
            raise InvalidArgument(
                f"{new!r} cannot go in a unit: systemd needs an absolute path without spaces"
            )
        text = text.replace(old + "/", new + "/")
    return text


@dataclass(frozen=True)
class UnitFile:
    """One file `lakeshore systemd install` writes."""

    path: Path
    text: str
    mode: int


def service_name(kind: str, queue: str | None = None) -> str:
    """The name `systemctl` knows the service by: `lakeshore-daemon@QUEUE` for a daemon."""
    return UNITS[kind].replace("@.service", f"@{queue}").removesuffix(".service")


def own_env(kind: str, queue: str | None) -> str:
    """The service's own EnvironmentFile, as its unit names it (`daemon-%i.env` for a daemon)."""
    return f"daemon-{queue}.env" if kind == "daemon" else f"{kind}.env"


def reads_shared_env(kind: str) -> bool:
    """Whether the unit reads lakeshore.env (the daemon and the controller reach a plane)."""
    return f"{SHIPPED_ENV_DIR}/{SHARED_ENV}" in shipped(kind)


def env_template(kind: str, queue: str | None) -> str:
    """A commented EnvironmentFile for one service: every line a setting the reader may enable."""
    if kind == "daemon":
        return (
            f"# lakeshore-daemon@{queue}: this queue's daemon settings (read by systemd).\n"
            "# Any option of lakeshore-daemon --help as LAKESHORE_DAEMON_<OPTION>, e.g.\n"
            "#LAKESHORE_DAEMON_CONCURRENCY=4\n"
            "#LAKESHORE_DAEMON_GPUS_PER_JOB=1\n"
            "#LAKESHORE_DAEMON_HANDLER=mypkg.jobs:handle\n"
            "#LAKESHORE_DAEMON_STORAGE=s3://bucket/prefix\n"
            "#CUDA_VISIBLE_DEVICES=0,1\n"
        )
    if kind == "server":
        return (
            "# lakeshore-server: the control plane's settings (read by systemd; mode 0600, it\n"
            "# may hold a database password). Without LAKESHORE_STORE: SQLite in its state dir.\n"
            "#LAKESHORE_STORE=postgresql://lakeshore:PASSWORD@db.internal/lakeshore\n"
            "#LAKESHORE_MAX_BODY_MB=64\n"
        )
    return (
        "# lakeshore-controller: provider credentials and settings (read by systemd; mode 0600).\n"
        "#AWS_ACCESS_KEY_ID=\n"
        "#AWS_SECRET_ACCESS_KEY=\n"
        "#AWS_DEFAULT_REGION=us-east-1\n"
    )


def shared_env(settings: Mapping[str, str]) -> str:
    """lakeshore.env: how the units of this box reach their plane (URL, token, namespace)."""
    lines = ["# How the Lakeshore units on this box reach their plane (mode 0600: a token)."]
    for key, value in settings.items():
        if not value.isprintable():
            raise InvalidArgument(f"{key} holds a line break or a control character")
        lines.append(f"{key}={shlex.quote(value)}")
    return "\n".join(lines) + "\n"


def plan(
    kind: str,
    queue: str | None,
    *,
    unit_dir: Path,
    env_dir: Path,
    bin_dir: str,
) -> list[UnitFile]:
    """The unit and the service's own EnvironmentFile (the shared one is the caller's)."""
    unit = render(kind, bin_dir=bin_dir, env_dir=str(env_dir))
    return [
        UnitFile(unit_dir / UNITS[kind], unit, UNIT_MODE),
        UnitFile(env_dir / own_env(kind, queue), env_template(kind, queue), ENV_MODE),
    ]


def write(file: UnitFile) -> None:
    """Write one file whole, with its mode from the start (an EnvironmentFile is never readable
    by others, not even for a moment), replacing what was there in one rename."""
    file.path.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.path.with_name(f".{file.path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, file.mode)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(file.text)
        os.chmod(tmp, file.mode)  # the umask may have narrowed it
        os.replace(tmp, file.path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def user_exists(name: str = SERVICE_USER) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
