"""`--token-file` / LAKESHORE_TOKEN_FILE: a token that never rides a command line.

The file is read once, before the command runs; one other users could open is refused naming
its path and mode, as ssh refuses an open private key; and which of a token and a file wins is
decided by where each was given, never silently by accident.
"""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.plane.options import plane_options
from dreamlake.lakeshore.plane.token_file import read_token_file


@click.command()
@plane_options
def show(url: str | None, token: str | None, namespace: str | None) -> None:
    click.echo(f"token={token}")


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    base = {"LAKESHORE_TOKEN": None, "LAKESHORE_TOKEN_FILE": None}
    result = CliRunner().invoke(show, list(args), env={**base, **(env or {})})
    return result.exit_code, result.output


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("  lks_from-file\n")
    path.chmod(0o600)
    return path


def test_the_file_gives_the_command_its_token(token_file: Path) -> None:
    assert run("--token-file", str(token_file)) == (0, "token=lks_from-file\n")
    assert run(env={"LAKESHORE_TOKEN_FILE": str(token_file)}) == (0, "token=lks_from-file\n")


def test_the_command_line_beats_the_environment_and_both_typed_are_refused(
    token_file: Path,
) -> None:
    file_env = {"LAKESHORE_TOKEN_FILE": str(token_file)}
    assert run("--token", "lks_typed", env=file_env) == (0, "token=lks_typed\n")
    token_env = {"LAKESHORE_TOKEN": "lks_env"}
    assert run("--token-file", str(token_file), env=token_env) == (0, "token=lks_from-file\n")
    # both in the environment: the token itself, as the deploy's entrypoint has it
    assert run(env={**file_env, **token_env}) == (0, "token=lks_env\n")

    code, output = run("--token", "lks_typed", "--token-file", str(token_file))
    assert code == 2 and "give --token or --token-file, not both" in output


@pytest.mark.parametrize("mode", [0o604, 0o640, 0o644, 0o660, 0o606, 0o666, 0o704], ids=oct)
def test_a_file_other_users_may_open_is_refused_naming_its_path_and_mode(
    token_file: Path, mode: int
) -> None:
    token_file.chmod(mode)

    code, output = run("--token-file", str(token_file))

    assert code == 2
    assert f"the token file {token_file} is open to other users (mode {mode:04o})" in output
    assert f"chmod 600 {token_file}" in output
    assert "lks_from-file" not in output and "token=" not in output


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "is empty"),
        ("\n \n", "is empty"),
        ("lks_a lks_b\n", "holds more than one word"),
        ("lks_secret\nsecond line\n", "holds more than one word"),
    ],
)
def test_a_file_that_holds_no_single_token_is_refused_without_echoing_it(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "token"
    path.write_text(content)
    path.chmod(0o600)

    with pytest.raises(InvalidArgument, match=message) as refused:
        read_token_file(path)
    assert "lks_" not in str(refused.value)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    code, output = run("--token-file", str(tmp_path / "nope"))

    assert code == 2
    assert f"cannot read the token file {tmp_path / 'nope'}" in output


def test_a_file_not_in_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_bytes(b"\xff\xfe")
    path.chmod(0o400)

    with pytest.raises(InvalidArgument, match="is not text"):
        read_token_file(path)
