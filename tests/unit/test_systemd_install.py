"""`lakeshore systemd show | install`: the shipped units, fitted to this box and written with
their EnvironmentFiles, never over an operator's changes unless told to."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from dreamlake.lakeshore.cli.main import cli
from dreamlake.lakeshore.daemon import unitfiles


def install(tmp_path: Path, *args: str) -> Result:
    dirs = ["--unit-dir", str(tmp_path / "units"), "--env-dir", str(tmp_path / "etc")]
    return CliRunner().invoke(cli, ["systemd", "install", *dirs, *args])


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_install_writes_the_unit_and_its_environment_file_and_prints_systemctl(
    tmp_path: Path,
) -> None:
    result = install(tmp_path, "--daemon", "training", "--bin-dir", "/srv/ls/bin")

    assert result.exit_code == 0, result.output
    unit = tmp_path / "units" / "lakeshore-daemon@.service"
    env = tmp_path / "etc" / "daemon-training.env"
    assert mode(unit) == 0o644 and mode(env) == 0o600
    text = unit.read_text()
    assert "ExecStart=/srv/ls/bin/lakeshore-daemon --queue %i" in text
    assert f"EnvironmentFile=-{tmp_path}/etc/daemon-%i.env" in text
    assert "/opt/lakeshore/" not in text and "-/etc/lakeshore/" not in text
    assert "LAKESHORE_DAEMON_CONCURRENCY" in env.read_text()
    assert "systemctl daemon-reload" in result.output
    assert "systemctl enable --now lakeshore-daemon@training" in result.output


def test_show_prints_what_install_writes(tmp_path: Path) -> None:
    install(tmp_path, "--server", "--bin-dir", "/srv/ls/bin")

    shown = CliRunner().invoke(
        cli,
        ["systemd", "show", "server", "--bin-dir", "/srv/ls/bin", "--env-dir", f"{tmp_path}/etc"],
    )

    assert shown.exit_code == 0
    assert shown.output == (tmp_path / "units" / "lakeshore-server.service").read_text()


def test_a_changed_file_is_never_replaced_without_force_and_nothing_else_is_written(
    tmp_path: Path,
) -> None:
    assert install(tmp_path, "--daemon", "training").exit_code == 0
    env = tmp_path / "etc" / "daemon-training.env"
    env.write_text("LAKESHORE_DAEMON_CONCURRENCY=8\n")

    refused = install(tmp_path, "--daemon", "training", "--daemon", "eval")

    assert refused.exit_code == 1
    assert f"{env} already exists with other content: pass --force" in refused.output
    assert env.read_text() == "LAKESHORE_DAEMON_CONCURRENCY=8\n"
    assert not (tmp_path / "etc" / "daemon-eval.env").exists()  # all or nothing

    forced = install(tmp_path, "--daemon", "training", "--daemon", "eval", "--force", "--json")

    assert forced.exit_code == 0, forced.output
    report = json.loads(forced.output)
    assert str(env) in report["written"]
    assert str(tmp_path / "units" / "lakeshore-daemon@.service") in report["unchanged"]
    assert (
        "systemctl enable --now lakeshore-daemon@training lakeshore-daemon@eval"
        in (report["commands"])
    )


def test_url_and_token_go_to_the_shared_environment_file_readable_by_root_only(
    tmp_path: Path,
) -> None:
    result = install(
        tmp_path, "--controller", "--url", "http://cp.internal:8765", "--token", "ls_abc"
    )

    assert result.exit_code == 0, result.output
    shared = tmp_path / "etc" / "lakeshore.env"
    assert mode(shared) == 0o600
    assert "LAKESHORE_URL=http://cp.internal:8765\nLAKESHORE_TOKEN=ls_abc\n" in shared.read_text()


def test_the_token_can_come_from_a_file_instead_of_the_command_line(tmp_path: Path) -> None:
    token = tmp_path / "worker.token"
    token.write_text("lks_from-file\n")
    token.chmod(0o600)

    result = install(
        tmp_path, "--daemon", "gpu", "--url", "http://cp:8765", "--token-file", str(token)
    )

    assert result.exit_code == 0, result.output
    assert "LAKESHORE_TOKEN=lks_from-file\n" in (tmp_path / "etc" / "lakeshore.env").read_text()


def test_a_token_file_others_may_read_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    token = tmp_path / "worker.token"
    token.write_text("lks_from-file\n")
    token.chmod(0o644)

    result = install(tmp_path, "--daemon", "gpu", "--token-file", str(token))

    assert result.exit_code == 2, result.output
    assert f"the token file {token} is open to other users (mode 0644)" in result.output
    assert "lks_from-file" not in result.output
    assert not (tmp_path / "units").exists() and not (tmp_path / "etc").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "name what to install: --daemon QUEUE, --server or --controller"),
        (("--daemon", "Training"), "Invalid value for '--daemon': invalid queue name 'Training'"),
        (("--daemon", "t", "--token", "a b"), "the token must be printable ASCII"),
        (("--server", "--url", "http://cp"), "which only the daemon and the controller read"),
        (("--daemon", "t", "--bin-dir", "relative/bin"), "needs an absolute path"),
    ],
)
def test_refusals_name_what_was_wrong(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    result = install(tmp_path, *args)

    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "units").exists()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_analyze_verify_accepts_what_install_wrote(tmp_path: Path) -> None:
    """The default --bin-dir is this installation's: the ExecStart scripts exist."""
    result = install(tmp_path, "--daemon", "training", "--server", "--controller")
    assert result.exit_code == 0, result.output
    folder = tmp_path / "units"
    # systemd verifies an instance of a template, not the template itself
    shutil.copy(folder / "lakeshore-daemon@.service", folder / "lakeshore-daemon@training.service")
    names = ["lakeshore-daemon@training.service", "lakeshore-server.service"]
    names.append("lakeshore-controller.service")

    verify = subprocess.run(
        ["systemd-analyze", "verify", *(str(folder / name) for name in names)],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "Unknown key" not in verify.stderr and "Invalid" not in verify.stderr
    assert unitfiles.default_bin_dir() in (folder / "lakeshore-server.service").read_text()
