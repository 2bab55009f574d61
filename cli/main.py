"""`lakeshore`: the command line. Each group lives in its own module and registers here.

The verbs are loaded lazily: `lakeshore queues ls` imports the queues module and nothing else,
and `lakeshore --help` imports none of them (their short help is kept in `COMMANDS`). Every verb
module pulls in what it needs (rich, httpx, the server, the controller, ...), and importing them
all cost more start-up time than most commands take to run (issue 17, item 5).
tests/unit/test_cli_startup.py checks that the table says what the verbs themselves say.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from typing import NamedTuple

import click

from dreamlake.lakeshore import __version__
from dreamlake.lakeshore.extras import missing_extra

from .errors import OneLineGroup


class Verb(NamedTuple):
    """A top-level command, known without importing it: enough to route to it and to list it."""

    name: str
    module: str  # under dreamlake.lakeshore.cli; the command is its attribute `attr`
    attr: str
    short_help: str


COMMANDS = [
    Verb(
        "queues",
        "queues",
        "queues",
        "Queues: named pipes of pending work that daemons subscribe to.",
    ),
    Verb("daemon", "daemon", "daemon", "Worker daemons: ls, show, change membership, drain."),
    Verb(
        "server",
        "server",
        "server",
        "Run the control plane (Starlette + uvicorn; needs the `server` extra).",
    ),
    Verb(
        "tokens",
        "tokens",
        "tokens",
        "Bearer tokens for the control plane (stored hashed; shown once).",
    ),
    Verb(
        "namespaces",
        "namespaces",
        "namespaces",
        "Namespaces and their orgs (a token authorises its namespace's org siblings).",
    ),
    Verb(
        "exec",
        "exec_",
        "exec_",
        "Submit COMMAND (one quoted string, or words after --) and print its invocation id.",
    ),
    Verb("jobs", "jobs", "jobs", "Invocations: list, inspect, follow, cancel, retry."),
    Verb(
        "submit",
        "submit",
        "submit",
        "Submit one job to QUEUE (payload: --payload-json or --payload); prints its id.",
    ),
    Verb(
        "compose",
        "compose",
        "compose",
        "Declare queues (and providers, daemons) in lakeshore.yaml; make the plane match.",
    ),
    Verb(
        "providers",
        "providers",
        "providers",
        "Named provider configs: where daemons are launched (local processes, EC2, ...).",
    ),
    Verb(
        "schedules",
        "schedules",
        "schedules",
        "Cron schedules: a job submitted at every slot, once, however many servers run.",
    ),
    Verb(
        "controller",
        "controller",
        "controller",
        "Run the elastic controller (same as `lakeshore-controller`; --help for its options).",
    ),
    Verb(
        "systemd",
        "systemd",
        "systemd",
        "systemd units for the daemon, the server and the controller: show, install.",
    ),
    Verb(
        "runtime",
        "runtime",
        "runtime",
        "A job's runtime: the code and requirements it brings (inspect a workdir).",
    ),
    Verb(
        "status",
        "status",
        "status",
        "One screen: queues, maps and schedules, daemons and the controller's last decisions.",
    ),
]


class LazyCommands(MutableMapping[str, click.Command]):
    """The group's `commands`: every verb's name is known; its module is imported on first look-up.

    A mapping rather than overridden `get_command` / `list_commands`, so that code that walks
    `cli.commands` (the CLI fuzz tests, shell completion) still sees every verb.
    """

    def __init__(self, verbs: list[Verb]) -> None:
        self._verbs = {verb.name: verb for verb in verbs}
        self._loaded: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded:
            verb = self._verbs[name]  # KeyError: no such command, as for a plain dict
            self._loaded[name] = _load(verb)
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        self._verbs.pop(name, None)
        del self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter({**dict.fromkeys(self._verbs), **dict.fromkeys(self._loaded)})

    def __len__(self) -> int:
        return len(self._verbs.keys() | self._loaded.keys())

    def listing(self, names: list[str], width: int) -> list[tuple[str, str]]:
        """(name, one-line help) of each shown verb, as `--help` lists them, importing none: a
        verb already loaded (or added by hand) speaks for itself, and hides if it is hidden."""
        shown = [n for n in names if n not in self._loaded or not self._loaded[n].hidden]
        if not shown:
            return []
        limit = width - 6 - max(len(name) for name in shown)  # click's own spacing
        return [(name, self._short_help(name, limit)) for name in shown]

    def _short_help(self, name: str, limit: int) -> str:
        if name in self._loaded:
            return self._loaded[name].get_short_help_str(limit)
        # A stand-in command cuts the text as click cuts the real one's help.
        return click.Command(name, help=self._verbs[name].short_help).get_short_help_str(limit)


def _load(verb: Verb) -> click.Command:
    """Import a verb's module; a missing extra is one line naming the pip command, as the
    console script says it for the modules it imports itself (cli/scripts.py)."""
    try:
        module = importlib.import_module(f"{__package__}.{verb.module}")
    except ModuleNotFoundError as exc:
        error = missing_extra(exc, f"lakeshore {verb.name}")
        if error is None:
            raise
        raise error from None
    command: click.Command = getattr(module, verb.attr)
    return command


class LakeshoreGroup(OneLineGroup):
    """Turns a refused operation into one clear line and exit code 1, never a traceback; lists
    its verbs from the table above, so `--help` imports none of them."""

    commands: LazyCommands

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = self.commands.listing(self.list_commands(ctx), formatter.width)
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(
    cls=LakeshoreGroup,
    commands=LazyCommands(COMMANDS),
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="lakeshore")
def cli() -> None:
    """Lakeshore: a durable task queue for ML work."""


def main() -> None:
    cli()
