"""`lakeshore compose`: make the plane match `lakeshore.yaml`.

    lakeshore compose validate [-f FILE]
    lakeshore compose diff [-f FILE] [--prune] [--exit-code]
    lakeshore compose up   [-f FILE] [--prune] [--force]
    lakeshore compose down [-f FILE] [--force]

`up` creates and patches, never deletes unless `--prune` names that intent; `diff` prints the
same plan without writing. `down` deletes the file's queues (never the default one). The file's
format and rules are in `dreamlake.lakeshore.compose`. Exit status: 0 done (or, for `diff
--exit-code`, in sync), 1 an invalid file or a refusal (every problem is printed with its file
and line), 2 usage error or, for `diff --exit-code`, changes pending (as `terraform plan
-detailed-exitcode`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import click

from dreamlake.lakeshore.compose import (
    Change,
    ComposeError,
    ComposeFile,
    apply,
    load,
    plan,
    plan_down,
)
from dreamlake.lakeshore.plane.base import Plane
from dreamlake.lakeshore.plane.options import plane_options, plane_session

from .output import json_option

DEFAULT_FILE = "lakeshore.yaml"
SYMBOL = {
    "create": "+",
    "patch": "~",
    "replace": "~",
    "delete": "-",
    "unchanged": "=",
    "blocked": "!",
    "not-applied": "?",
    "skip": " ",
}
COLOR = {
    "create": "green",
    "patch": "yellow",
    "replace": "yellow",
    "delete": "red",
    "blocked": "red",
}


def _file_option(fn: Any) -> Any:
    return click.option(
        "--file",
        "-f",
        "path",
        default=DEFAULT_FILE,
        show_default=True,
        type=click.Path(dir_okay=False, path_type=Path),
        help="The compose file.",
    )(fn)


def _load(path: Path) -> ComposeFile:
    try:
        return load(path)
    except ComposeError as exc:
        for issue in exc.issues:  # each with its file and line; the last line sums them up
            click.echo(str(issue), err=True)
        raise click.ClickException(
            f"{path} is not valid: {len(exc.issues)} problem(s), listed above"
        ) from None


def _open(
    compose: ComposeFile, url: str | None, token: str | None, ns: str | None
) -> AbstractContextManager[Plane]:
    """The plane of the file's namespace, for one block; a different --namespace / env is
    refused, not guessed."""
    if compose.namespace and ns and ns != compose.namespace:
        raise click.ClickException(
            f"{compose.path} declares namespace '{compose.namespace}' but --namespace / "
            f"LAKESHORE_NAMESPACE says '{ns}'"
        )
    return plane_session(url, token, compose.namespace or ns)


def _show(value: Any) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else repr(value)


def _print(changes: Sequence[Change], header: str) -> None:
    click.echo(header)
    for c in changes:
        line = f"{SYMBOL.get(c.action, '?')} {c.target} {c.name}: "
        if c.action == "not-applied":
            line += c.note
        else:
            line += c.action + (f" ({c.note})" if c.note else "")
        click.secho(line, fg=COLOR.get(c.action))
        for name, (old, new) in c.fields.items():
            text = _show(new) if old is None else f"{_show(old)} -> {_show(new)}"
            click.echo(f"    {name}: {text}")
    pending = sum(c.is_change for c in changes)
    click.echo(f"{pending} change(s)" if pending else "in sync: nothing to change")


def _emit(changes: Sequence[Change], namespace: str, **extra: Any) -> None:
    rows = [
        {
            "action": c.action,
            "target": c.target,
            "name": c.name,
            "fields": {k: {"from": v[0], "to": v[1]} for k, v in c.fields.items()},
            "note": c.note,
        }
        for c in changes
    ]
    payload = {"namespace": namespace, "changes": rows, **extra}
    click.echo(json.dumps(payload, indent=2, sort_keys=True, default=str))


@click.group("compose")
def compose() -> None:
    """Declare queues (and providers, daemons) in lakeshore.yaml; make the plane match."""


@compose.command("validate")
@_file_option
def validate(path: Path) -> None:
    """Check the file without contacting any plane."""
    spec = _load(path)
    click.echo(
        f"{path}: valid ({len(spec.queues)} queue(s), {len(spec.providers)} provider(s), "
        f"{len(spec.daemons)} daemon(s))"
    )


@compose.command("diff")
@_file_option
@click.option("--prune", is_flag=True, help="Also show deletes of queues not in the file.")
@click.option("--exit-code", is_flag=True, help="Exit 2 when changes are pending, 0 in sync.")
@json_option
@plane_options
def diff(
    path: Path,
    prune: bool,
    exit_code: bool,
    as_json: bool,
    url: str | None,
    token: str | None,
    namespace: str | None,
) -> None:
    """Show what `up` would change; writes nothing."""
    spec = _load(path)
    with _open(spec, url, token, namespace) as plane:
        changes = plan(plane, spec, prune=prune)
        ns = plane.namespace
    if as_json:
        _emit(changes, ns)
    else:
        _print(changes, f"# {path} against namespace {ns}")
    if any(c.action == "blocked" for c in changes):
        sys.exit(1)
    if exit_code and any(c.is_change for c in changes):
        sys.exit(2)


@compose.command("up")
@_file_option
@click.option("--prune", is_flag=True, help="Delete the namespace's queues not in the file.")
@click.option("--force", is_flag=True, help="With --prune: delete queues that have members.")
@json_option
@plane_options
def up(
    path: Path,
    prune: bool,
    force: bool,
    as_json: bool,
    url: str | None,
    token: str | None,
    namespace: str | None,
) -> None:
    """Create and patch queues to match the file (delete only with --prune)."""
    spec = _load(path)
    with _open(spec, url, token, namespace) as plane:
        changes = plan(plane, spec, prune=prune)
        ns = plane.namespace
        blocked = [c for c in changes if c.action == "blocked"]
        if blocked and not as_json:
            _print(changes, f"# {path} against namespace {ns}")
        done = apply(plane, spec, changes, force=force)
    if as_json:
        _emit(changes, ns, applied=len(done))
    else:
        _print(changes, f"# {path} -> namespace {ns}")
        if done:
            click.echo(f"applied {len(done)} change(s)")


@compose.command("down")
@_file_option
@click.option("--force", is_flag=True, help="Delete queues that still have member workers.")
@json_option
@plane_options
def down(
    path: Path,
    force: bool,
    as_json: bool,
    url: str | None,
    token: str | None,
    namespace: str | None,
) -> None:
    """Delete the queues the file declares (the default queue is kept)."""
    spec = _load(path)
    with _open(spec, url, token, namespace) as plane:
        changes = plan_down(plane, spec)
        ns = plane.namespace
        done = apply(plane, spec, changes, force=force)
    if as_json:
        _emit(changes, ns, applied=len(done))
    else:
        _print(changes, f"# {path}: down in namespace {ns}")
