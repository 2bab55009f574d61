"""`lakeshore runtime inspect DIR`: what a job's `workdir` would ship, before shipping it.

The same walk a submit makes (ignore rules, defaults, size cap), printed: a user finds the
checkpoint folder that makes a bundle huge here, not in a refused submit.
"""

from __future__ import annotations

from pathlib import Path

import click

from dreamlake.lakeshore.runtime import scan
from dreamlake.lakeshore.runtime.limits import WARN_SHARE, max_bytes, mb

from .output import emit_json
from .table import Column, print_table


@click.group("runtime")
def runtime() -> None:
    """A job's runtime: the code and requirements it brings (inspect a workdir)."""


@runtime.command("inspect")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--exclude",
    "excludes",
    multiple=True,
    metavar="PATTERN",
    help="An ignore pattern (git's syntax) on top of the defaults and .gitignore; repeatable.",
)
@click.option("--top", default=10, show_default=True, help="How many of the largest to list.")
@click.option("--json", "as_json", is_flag=True, help="JSON output for scripts.")
def inspect(directory: Path, excludes: tuple[str, ...], top: int, as_json: bool) -> None:
    """What DIR would ship as a job's workdir: file count, size, largest paths, digest."""
    manifest = scan(directory, excludes)
    largest = manifest.largest(top)
    cap = max_bytes()
    if as_json:
        emit_json(
            {
                "digest": manifest.digest,
                "files": len(manifest.entries),
                "bytes": manifest.size,
                "cap_bytes": cap,
                "largest": [{"path": e.path, "bytes": e.size} for e in largest],
            }
        )
        return
    click.echo(f"digest  {manifest.digest}")
    click.echo(f"files   {len(manifest.entries)}")
    click.echo(f"size    {mb(manifest.size)} (cap {mb(cap)}, LAKESHORE_RUNTIME_MAX_MB)")
    if manifest.size > cap:
        click.echo("        over the cap: a submit with this workdir is refused")
    elif manifest.size > WARN_SHARE * cap:
        click.echo("        near the cap: a submit with this workdir warns")
    if largest:
        click.echo("")
        print_table([Column("largest"), Column("size")], [(e.path, mb(e.size)) for e in largest])
