"""`lakeshore queues prune`: delete run queues that are empty and idle (see sdk/prune.py).

It also applies retention at the same age (unless --no-trim): the frames and rows of invocations
that ended before the cutoff, and their spilled payloads (see sdk/retention.py).

Exported as the click command `prune`; `cli/queues.py` attaches it to the `queues` group.
"""

from __future__ import annotations

import json
from dataclasses import asdict

import click

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.plane.options import plane_options, plane_session
from dreamlake.lakeshore.prune import parse_duration, prune_run_queues


@click.command("prune")
@click.option(
    "--older-than",
    "older_than",
    default="7d",
    show_default=True,
    help="Idle for at least this long: 90s, 30m, 12h, 7d, 2w.",
)
@click.option("--dry-run", is_flag=True, help="List what would be deleted; delete nothing.")
@click.option("--json", "as_json", is_flag=True, help="JSON output for scripts.")
@click.option(
    "--trim/--no-trim",
    default=True,
    show_default=True,
    help="Also delete invocations that ended before --older-than (frames, rows, spills).",
)
@plane_options
def prune(
    older_than: str,
    dry_run: bool,
    as_json: bool,
    trim: bool,
    url: str | None,
    token: str | None,
    namespace: str | None,
) -> None:
    """Delete run queues (from @udf(scope="run")) that are empty and idle for --older-than.

    Only queues the SDK created as run queues are considered; a queue with queued or running
    invocations, or with member workers, is kept. Invocations of a deleted queue stay readable.
    Unless --no-trim, it also deletes this namespace's invocations that ended before
    --older-than (frames, rows and spilled payloads), as the server's retention does.
    """
    try:
        seconds = parse_duration(older_than)
    except InvalidArgument as exc:
        raise click.BadParameter(str(exc), param_hint="--older-than") from None
    from dreamlake.lakeshore import (
        retention,  # the object store behind it: only this verb pays for it
    )

    with plane_session(url, token, namespace) as plane:
        result = prune_run_queues(plane, older_than_s=seconds, dry_run=dry_run)
        trimmed = (
            retention.trim(plane, frames_older_than_s=seconds, invocations_older_than_s=seconds)
            if trim and not dry_run
            else None
        )
    if as_json:
        out = {**asdict(result), "dry_run": dry_run}
        out["trimmed"] = asdict(trimmed) if trimmed is not None else None
        click.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    if trimmed is not None:
        click.echo(
            f"trimmed {trimmed.invocations} ended invocation(s), {trimmed.frames} frame(s), "
            f"{trimmed.refs_deleted} spilled object(s)"
        )
        for line in trimmed.problems:
            click.echo(f"could not delete {line}", err=True)
    verb = "would prune" if dry_run else "pruned"
    for name in result.pruned:
        click.echo(f"{verb} {name}")
    for name, why in sorted(result.kept.items()):
        click.echo(f"kept {name}: {why}")
    click.echo(f"{len(result.pruned)} run queue(s) {verb}, {len(result.kept)} kept")
