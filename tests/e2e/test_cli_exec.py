"""`lakeshore exec` parses its own options strictly and passes the command through verbatim
(issue 45 item 10), run as real `lakeshore` processes on the embedded plane of a temp home.

A misspelt option before the command used to be taken as the command's first words and
submitted; now it is a usage error (exit 2) that names it, and nothing reaches the queue. The
words after `--` are the command exactly as given, its own options and a second `--` included.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dreamlake.lakeshore import codec
from dreamlake.lakeshore.envelope import Envelope
from dreamlake.lakeshore.plane.base import Plane
from dreamlake.lakeshore.plane.default import open_plane
from tests.support.claiming import claim
from tests.support.server import LAUNCH

QUEUE = "exec-q"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESHORE_")}
    env["LAKESHORE_HOME"] = str(tmp_path)
    return env


@pytest.fixture
def plane(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Plane]:
    """The same embedded plane the commands write, opened here to see what they submitted."""
    for name in [k for k in os.environ if k.startswith("LAKESHORE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("LAKESHORE_HOME", env["LAKESHORE_HOME"])
    opened = open_plane(None, None, None)
    yield opened
    opened.close()


def lakeshore(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", LAUNCH, *args], env=env, capture_output=True, text=True, timeout=60
    )


def submitted(env: dict[str, str]) -> list[dict[str, object]]:
    listed = lakeshore(env, "jobs", "ls", "--json")
    assert listed.returncode == 0, listed.stderr
    rows: list[dict[str, object]] = json.loads(listed.stdout)
    return rows


def command_of(plane: Plane, queue: str) -> str:
    job = claim(plane, [queue], worker="exec-test")
    assert job is not None, f"nothing was queued on {queue}"
    envelope = codec.decode(job.payload, allow_pickle=False)
    assert isinstance(envelope, Envelope) and envelope.kind == "exec"
    assert envelope.command is not None
    return envelope.command


@pytest.mark.parametrize(
    ("args", "named", "hint"),
    [
        (["-q", QUEUE, "--wiat", "--", "python", "x.py"], "--wiat", "--wait?"),
        (["--wrokdir", ".", "-q", QUEUE, "--", "echo", "hi"], "--wrokdir", "--cwd"),
        (["-q", QUEUE, "--gpu", "2", "--", "python", "x.py"], "--gpu", "--queue"),
        # without --, a command's own option is caught too, and the way to pass it is named
        (["-q", QUEUE, "python", "x.py", "--lr", "3"], "--lr", "go after --"),
    ],
    ids=["misspelt", "unknown-workdir", "unknown-gpu", "command-option-without-dashes"],
)
def test_an_unknown_option_is_a_usage_error_and_submits_nothing(
    env: dict[str, str], args: list[str], named: str, hint: str
) -> None:
    result = lakeshore(env, "exec", *args)

    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    error = result.stderr.strip().splitlines()[-1]
    assert f"No such option: {named}" in error and hint in error, error
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert submitted(env) == []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["-q", QUEUE, "--cwd", "--", "make"], "'--cwd' requires a value"),
        (["-q", QUEUE, "echo", "--", "hi"], "given both before --"),
        (["-q", QUEUE, "--"], "Missing argument 'COMMAND...'"),
        (["-q", QUEUE], "Missing argument 'COMMAND...'"),
    ],
    ids=["option-missing-its-value", "command-split-around-dashes", "nothing-after", "none"],
)
def test_a_malformed_command_line_is_a_usage_error_and_submits_nothing(
    env: dict[str, str], args: list[str], says: str
) -> None:
    result = lakeshore(env, "exec", *args)

    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert says in result.stderr.strip().splitlines()[-1], result.stderr
    assert submitted(env) == []


def test_the_words_after_dashes_are_the_command_verbatim(env: dict[str, str], plane: Plane) -> None:
    argv = ["python", "train.py", "--lr", "3", "--wait", "-q", "other", "--", "--help", "a b"]
    result = lakeshore(env, "exec", "-q", QUEUE, "--priority", "2", "--", *argv)

    assert result.returncode == 0, result.stderr
    [row] = submitted(env)
    assert row["id"] == result.stdout.strip()
    assert row["queue"] == QUEUE and row["priority"] == 2.0
    assert shlex.split(command_of(plane, QUEUE)) == argv


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["-q", QUEUE, "echo hi; exit 3"], "echo hi; exit 3"),
        (["echo hi", "--queue", QUEUE], "echo hi"),  # options may follow the quoted command
        (["-q", QUEUE, "--", "echo hi | wc -c"], "echo hi | wc -c"),  # one word: shell syntax
        (["-q", QUEUE, "echo", "a", "b"], "echo a b"),  # plain words without -- still work
    ],
    ids=["quoted", "quoted-then-options", "one-word-after-dashes", "words"],
)
def test_the_forms_that_worked_before_still_submit_their_command(
    env: dict[str, str], plane: Plane, args: list[str], line: str
) -> None:
    result = lakeshore(env, "exec", *args)

    assert result.returncode == 0, result.stderr
    assert command_of(plane, QUEUE) == line
