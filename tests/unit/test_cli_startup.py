"""`lakeshore --help` and `lakeshore queues ls` import only what they need (issue 17, item 5).

Start-up time is measured by hand (the numbers are in the change note); no shared machine could
assert one. This checks the cause instead: the heavy modules, and the verbs not asked for, stay
unloaded, and the table that lets `--help` list the verbs unloaded says what the verbs say.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from dreamlake.lakeshore.cli import main as cli_main

#: What neither verb needs: the rich renderer, the HTTP client, the server stack, the Postgres
#: driver, S3 and numpy.
HEAVY = {"rich", "httpx", "uvicorn", "starlette", "psycopg", "boto3", "numpy"}

VERB_MODULES = {f"dreamlake.lakeshore.cli.{verb.module}" for verb in cli_main.COMMANDS}


def modules_after(args: list[str], home: Path) -> tuple[set[str], str]:
    """The modules loaded once the `lakeshore` console script has run `args`, and its stdout."""
    script = (
        "import json, sys\n"
        f"sys.argv = ['lakeshore', *{args!r}]\n"
        "from dreamlake.lakeshore.cli.scripts import lakeshore\n"
        "try:\n"
        "    lakeshore()\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESHORE_")}
    env["LAKESHORE_HOME"] = str(home)
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=env,
    )
    *printed, modules = out.stdout.rstrip("\n").split("\n")
    return set(json.loads(modules)), "\n".join(printed)


def test_help_imports_no_verb_and_nothing_heavy(tmp_path: Path) -> None:
    loaded, shown = modules_after(["--help"], tmp_path)

    assert not loaded & HEAVY, sorted(loaded & HEAVY)
    assert not loaded & VERB_MODULES, sorted(loaded & VERB_MODULES)
    for verb in cli_main.COMMANDS:
        assert f"  {verb.name}  " in shown, verb.name


def test_queues_ls_on_an_empty_plane_imports_only_its_verb(tmp_path: Path) -> None:
    loaded, shown = modules_after(["queues", "ls"], tmp_path)

    assert not loaded & HEAVY, sorted(loaded & HEAVY)
    # cli/controller.py is also where `queues stats` reads the controller's figures: a few
    # lines, which import the controller itself only when run.
    assert loaded & VERB_MODULES == {
        "dreamlake.lakeshore.cli.queues",
        "dreamlake.lakeshore.cli.controller",
    }
    assert "dreamlake.lakeshore.controller.main" not in loaded
    header, row, *_ = shown.splitlines()  # the description folds at 80 columns
    assert header.split() == ["namespace", "name", "kind", "state", "elasticity", "description"]
    assert row.split()[:5] == ["default", "default", "fifo", "active", "none"]


def test_version_is_answered_before_click_and_says_what_click_says(tmp_path: Path) -> None:
    # issue 45, item 4: click and the verb table were most of what `--version` did
    loaded, shown = modules_after(["--version"], tmp_path)

    assert not loaded & {"click", "dreamlake.lakeshore.cli.main"}, sorted(loaded)
    assert shown + "\n" == CliRunner().invoke(cli_main.cli, ["--version"]).output


@pytest.mark.parametrize("verb", cli_main.COMMANDS, ids=lambda verb: verb.name)
def test_the_table_says_what_each_verb_says(verb: cli_main.Verb) -> None:
    command = getattr(
        __import__(f"dreamlake.lakeshore.cli.{verb.module}", fromlist=["_"]), verb.attr
    )

    assert command.name == verb.name
    assert not command.hidden
    for limit in (45, 200):  # cut as an 80-column `--help` cuts it, and whole
        cut = click.Command(verb.name, help=verb.short_help).get_short_help_str(limit)
        assert cut == command.get_short_help_str(limit)


def test_help_lists_the_verbs_as_click_would_with_all_of_them_loaded() -> None:
    lazy = CliRunner().invoke(cli_main.cli, ["--help"], terminal_width=80).output
    eager = click.Group(
        "cli",
        commands=[cli_main.cli.commands[verb.name] for verb in cli_main.COMMANDS],
        help=cli_main.cli.help,
        params=cli_main.cli.params,
        context_settings=cli_main.cli.context_settings,
    )

    assert CliRunner().invoke(eager, ["--help"], terminal_width=80).output == lazy


def test_an_unknown_verb_is_still_a_usage_error() -> None:
    result = CliRunner().invoke(cli_main.cli, ["nosuch"])

    assert result.exit_code == 2 and "No such command 'nosuch'" in result.output


@pytest.mark.parametrize(
    ("args", "header"),
    [
        (["jobs", "ls"], ["id", "queue", "state", "submitted", "took"]),
        (["daemon", "ls"], ["name", "state", "queues", "slots", "gpus", "heartbeat"]),
        (["namespaces", "ls"], ["name", "org", "created"]),
        (["namespaces", "orgs"], ["org", "namespaces"]),
        # issue 45, item 4: rich was 30 ms of a 1M-deep `queues stats` beyond start-up
        (["queues", "stats", "default"], ["queue", "default", "namespace", "default"]),
        (["queues", "show", "default"], ["namespace", "default", "name", "default"]),
    ],
    ids=["jobs-ls", "daemon-ls", "namespaces-ls", "namespaces-orgs", "queues-stats", "queues-show"],
)
def test_listings_draw_their_table_without_rich(
    tmp_path: Path, args: list[str], header: list[str]
) -> None:
    # given an empty plane, when a listing runs, then it prints its header without rich
    loaded, shown = modules_after(args, tmp_path)

    assert "rich" not in loaded, "rich is imported by the verbs that draw with it, at their call"
    assert shown.split()[: len(header)] == header
