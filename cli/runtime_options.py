"""What a job brings and where it runs, on `lakeshore exec` and `lakeshore submit`, declared
once for both verbs: `--workdir`, `--requirements` and `--with` (issue 46, docs/runtime.md), and
`--nodes` and `--hang-timeout-s` (issue 47: that many daemons at once, and when they hang)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from dreamlake.lakeshore.runtime.spec import Runtime

F = TypeVar("F", bound=Callable[..., Any])


def runtime_options(fn: F) -> F:
    """Add the options; the command takes `workdir`, `requirements`, `with_`, `nodes` and
    `hang_timeout_s`."""
    fn = click.option(
        "--hang-timeout-s",
        type=click.FloatRange(0, 7 * 86400, min_open=True),
        default=None,
        metavar="SECONDS",
        help="With --nodes: when no part has moved (output, a checkpoint, dls.run.progress()) "
        "for this long, dump each part's stacks into its output and retry the job.",
    )(fn)
    fn = click.option(
        "--nodes",
        type=click.IntRange(1, 256),
        default=1,
        show_default=True,
        help="Run on this many daemons at once, one part each, with torch's env:// rendezvous "
        "(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).",
    )(fn)
    fn = click.option(
        "--with",
        "with_",
        multiple=True,
        metavar="PKG",
        help="A requirement to install for the job (uv, on the worker); repeatable.",
    )(fn)
    fn = click.option(
        "--requirements",
        type=click.Path(dir_okay=False),
        default=None,
        metavar="FILE",
        help="A requirements.txt to install for the job (its lines travel, -r included).",
    )(fn)
    fn = click.option(
        "--workdir",
        type=click.Path(file_okay=False),
        default=None,
        metavar="DIR",
        help="Ship DIR (git's ignore rules) as the job's working directory.",
    )(fn)
    return fn


def runtime_of(
    workdir: str | None, requirements: str | None, with_: tuple[str, ...]
) -> Runtime | None:
    """The options as a `dls.Runtime`; None when none was given (nothing ships for a command)."""
    if workdir is None and requirements is None and not with_:
        return None
    from dreamlake.lakeshore.runtime.spec import Runtime, read_requirements

    lines = list(with_)
    if requirements is not None:
        from pathlib import Path

        lines = read_requirements(Path(requirements)) + lines
    return Runtime(workdir=workdir, requirements=lines)
