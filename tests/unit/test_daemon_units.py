"""The systemd units parse and hold the settings the daemon's drain and GPUs depend on.

They are read as the package ships them (package data of dreamlake.lakeshore.daemon).
"""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path

import pytest

from dreamlake.lakeshore.daemon import unitfiles

NAMES = tuple(unitfiles.UNITS.values())
KINDS = {name: kind for kind, name in unitfiles.UNITS.items()}


def text_of(name: str) -> str:
    return unitfiles.shipped(KINDS[name])


def service(name: str) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(text_of(name))
    return parser["Service"]


def test_the_daemon_unit_is_a_notify_service_that_drains_and_sees_gpus() -> None:
    unit = service("lakeshore-daemon@.service")
    assert unit["Type"] == "notify"
    assert unit["KillMode"] == "mixed"
    assert unit["Restart"] == "on-failure"
    assert "--queue %i" in unit["ExecStart"]
    text = text_of("lakeshore-daemon@.service")
    assert "\nPrivateDevices" not in text and "\nDevicePolicy" not in text
    assert "EnvironmentFile=-/etc/lakeshore/lakeshore.env" in text


def test_drain_fits_inside_the_stop_timeout() -> None:
    text = text_of("lakeshore-daemon@.service")
    drain = int(text.split("LAKESHORE_DAEMON_DRAIN_TIMEOUT_S=")[1].split()[0])
    stop = int(text.split("\nTimeoutStopSec=")[1].split()[0])
    assert stop > drain + 10


@pytest.mark.parametrize("name", NAMES)
def test_every_unit_restarts_on_failure_and_reads_an_environment_file(name: str) -> None:
    unit = service(name)
    assert unit["Restart"] == "on-failure" and unit["KillMode"] == "mixed"
    assert "EnvironmentFile" in unit


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
@pytest.mark.parametrize("name", NAMES)
def test_systemd_analyze_verify_accepts_the_unit(name: str, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for exe in ("lakeshore", "lakeshore-daemon", "lakeshore-controller"):
        (bin_dir / exe).write_text("#!/bin/sh\n")
        (bin_dir / exe).chmod(0o755)
    target = tmp_path / name.replace("@.", "@training.")
    target.write_text(text_of(name).replace("/opt/lakeshore/bin", str(bin_dir)))
    result = subprocess.run(
        ["systemd-analyze", "verify", str(target)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Unknown key" not in result.stderr and "Invalid" not in result.stderr


@pytest.mark.parametrize("name", NAMES)
def test_no_unit_puts_a_token_on_its_command_line(name: str) -> None:
    """A command line is every user's to read (`ps`): tokens come from an EnvironmentFile."""
    exec_start = service(name)["ExecStart"]
    assert "--token" not in exec_start and "lks_" not in exec_start
