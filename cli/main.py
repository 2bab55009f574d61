"""`lakeshore`: the command line. Each group lives in its own module and registers here."""

from __future__ import annotations

import importlib

import click

from .. import __version__
from .errors import OneLineGroup

#: (module, attribute) of each command; a module that is not there yet is simply left out.
COMMANDS = [
    ("queues", "queues"),
    ("daemon", "daemon"),
    ("server", "server"),
    ("tokens", "tokens"),
    ("namespaces", "namespaces"),
    ("exec_", "exec_"),
    ("jobs", "jobs"),
    ("submit", "submit"),
    ("compose", "compose"),
    ("providers", "providers"),
    ("controller", "controller"),
    ("systemd", "systemd"),
    ("status", "status"),
]


class LakeshoreGroup(OneLineGroup):
    """Turns a refused operation into one clear line and exit code 1, never a traceback."""


@click.group(cls=LakeshoreGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lakeshore")
def cli() -> None:
    """Lakeshore: a durable task queue for ML work."""


def _register() -> None:
    for module, attr in COMMANDS:
        try:
            mod = importlib.import_module(f"{__package__}.{module}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{__package__}.{module}":
                continue
            raise
        cli.add_command(getattr(mod, attr))


_register()


def main() -> None:
    cli()
