"""One line for every error, never a traceback: what `lakeshore`, `lakeshore-daemon` and
`lakeshore-controller` print when a command cannot do what it was asked.

A refusal from a plane (`DispatchError`) is one line naming the error and exit code 1, as
click prints its own usage errors. Anything else escaping a command is a bug of ours; it is
still one line, which says so and how to see the traceback (LAKESHORE_DEBUG=1), so that a
script reading the last line of output always reads an error, not a stack.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Final

import click

from dreamlake.lakeshore.errors import DispatchError

#: Set to show the traceback of an unexpected error instead of its one line.
DEBUG_ENV = "LAKESHORE_DEBUG"
#: The words that start the line of an unexpected error (the CLI fuzz tests look for them).
BUG_PREFIX = "internal error"
#: How a command ends whose reader went away (`lakeshore jobs ls | head`): as a Unix tool
#: that SIGPIPE ended does, 128 + 13.
EXIT_BROKEN_PIPE: Final = 141


def one_line(text: str, limit: int = 2000) -> str:
    """A message on one line: a database's multi-line message joined, a huge one cut."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _invoke(invoke: Any, ctx: click.Context) -> Any:
    try:
        return invoke(ctx)
    except DispatchError as exc:
        raise click.ClickException(one_line(f"{type(exc).__name__}: {exc}")) from None
    except click.ClickException as exc:
        # A value with a line break stays on the line. `message` is typed Final, but it is a
        # plain instance attribute that format_message() reads: the exception keeps its kind,
        # its exit status and its usage hint.
        vars(exc)["message"] = one_line(exc.message)
        raise
    except (click.exceptions.Exit, click.Abort):
        raise
    except BrokenPipeError:
        _drop_stdout()
        raise click.exceptions.Exit(EXIT_BROKEN_PIPE) from None
    except Exception as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        raise click.ClickException(
            one_line(
                f"{BUG_PREFIX}: {type(exc).__name__}: {exc} (a bug in Lakeshore: run again "
                f"with {DEBUG_ENV}=1 for the traceback, and report it)"
            )
        ) from None


def _drop_stdout() -> None:
    """Point stdout at /dev/null: the interpreter's flush at exit would fail again on the
    closed pipe and print its own complaint."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


class OneLineGroup(click.Group):
    """A group whose subcommands end in one line and exit 1 when they fail."""

    def invoke(self, ctx: click.Context) -> Any:
        return _invoke(super().invoke, ctx)


class OneLineCommand(click.Command):
    """A command that ends in one line and exit 1 when it fails."""

    def invoke(self, ctx: click.Context) -> Any:
        return _invoke(super().invoke, ctx)
