"""`lakeshore queues`: the Queues page's verbs, against the embedded plane or a server.

The verbs are exactly the page's, irregular ones included (`ls`, `rm`). Every command takes
`--url/--token/--namespace` (see `context.py`), so the same line works on this box's SQLite
plane and on a control plane; `--json` prints machine-readable output for scripts, otherwise a
table for people, drawn by cli/table.py without rich, whose import alone costs more than a
verb's whole work on an empty plane.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import click

from dreamlake.lakeshore.plane.base import Plane
from dreamlake.lakeshore.plane.locality import DEFAULT_WAIT_S as DEFAULT_LOCALITY_WAIT_S
from dreamlake.lakeshore.plane.locality import MAX_WAIT_S as MAX_LOCALITY_WAIT_S
from dreamlake.lakeshore.plane.options import plane_options, plane_session
from dreamlake.lakeshore.resources import describe
from dreamlake.lakeshore.types import DEFAULT_QUEUE, QUEUE_STATES, WorkerInfo

from .controller import controller_figures
from .output import emit_json, hidden_alias, json_option, report, when
from .params import count, seconds
from .table import Column, print_pairs, print_table, wide_option

KINDS = ("fifo", "priority", "filo", "boltzmann")
ELASTICITY = ("none", "fixed", "elastic", "fully_elastic")


def _depth_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--max-depth and --on-full: how deep the queue may get, and what a submit then meets."""
    fn = click.option(
        "--on-full", type=click.Choice(["reject", "block"]), default=None, help="admission.on_full."
    )(fn)
    return click.option("--max-depth", type=count(1), default=None, help="admission.max_depth.")(fn)


def _locality_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--locality-wait-s",
        type=seconds(0, MAX_LOCALITY_WAIT_S),
        default=None,
        help="admission.locality_wait_s: how long a job whose objects live on one host waits "
        f"for a worker there before any worker takes it (0: never; default "
        f"{DEFAULT_LOCALITY_WAIT_S:g}).",
    )(fn)


def _json_object(text: str, option: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON ({exc}): {text!r}", param_hint=option) from None
    except RecursionError:
        raise click.BadParameter(
            "the JSON is nested deeper than a request may be: flatten it", param_hint=option
        ) from None


def _brief(policy: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in policy.items()) if policy else "-"


def _members(plane: Plane, name: str) -> list[WorkerInfo]:
    """Who pulls from `name`: its name in Worker.queues, or the empty list for default."""
    return [
        w
        for w in plane.workers()
        if w.state != "gone" and (name in w.queues or (name == DEFAULT_QUEUE and not w.queues))
    ]


def _print_queue(info: Any) -> None:
    wait = info.admission.get("locality_wait_s")
    print_pairs(
        [
            ("namespace", info.namespace),
            ("name", info.name),
            ("kind", info.kind),
            ("state", info.state),
            ("description", info.description),
            ("elasticity", _brief(info.elasticity)),
            ("admission", _brief(info.admission)),
            ("resources", describe(info.resources) if info.resources else "-"),
            (
                "locality_wait_s",
                f"{DEFAULT_LOCALITY_WAIT_S:g} (default)" if wait is None else f"{float(wait):g}",
            ),
            ("created", when(info.created_at)),
            ("updated", when(info.updated_at)),
        ]
    )


@click.group("queues")
def queues() -> None:
    """Queues: named pipes of pending work that daemons subscribe to."""


#: `queues ls`: the description, free text, last, where it folds onto lines of its own.
LS_COLUMNS = (
    Column("namespace"),
    Column("name"),
    Column("kind"),
    Column("state"),
    Column("elasticity"),
    Column("description"),
)


@queues.command("ls")
@click.option("--state", type=click.Choice(QUEUE_STATES), default=None, help="Only this state.")
@wide_option
@json_option
@plane_options
def ls(
    state: str | None,
    wide: bool,
    as_json: bool,
    url: str | None,
    token: str | None,
    namespace: str | None,
) -> None:
    """List the queues of the namespace's org (the default queue appears on first use)."""
    with plane_session(url, token, namespace) as plane:
        rows = plane.queues(state=state)
    if as_json:
        emit_json(rows)
        return
    print_table(
        LS_COLUMNS,
        (
            (q.namespace, q.name, q.kind, q.state, q.elasticity.get("kind", "none"), q.description)
            for q in rows
        ),
        wide=wide,
    )


hidden_alias(queues, "ls", "list")


@queues.command("add")
@click.argument("name")
@click.option("--kind", type=click.Choice(KINDS), default="fifo", show_default=True)
@click.option(
    "--elasticity",
    "elasticity_kind",
    type=click.Choice(ELASTICITY),
    default=None,
    help="Scaling policy kind; fixed / elastic / fully_elastic also need --max.",
)
@click.option("--min", "min_workers", type=count(0), default=None, help="elasticity.min (workers).")
@click.option("--max", "max_workers", type=count(0), default=None, help="elasticity.max (workers).")
@click.option("--description", default="", help="Free text.")
@_depth_options
@_locality_option
@json_option
@plane_options
def add(
    name: str,
    kind: str,
    elasticity_kind: str | None,
    min_workers: int | None,
    max_workers: int | None,
    description: str,
    max_depth: int | None,
    on_full: str | None,
    locality_wait_s: float | None,
    as_json: bool,
    url: str | None,
    token: str | None,
    namespace: str | None,
) -> None:
    """Create queue NAME."""
    elasticity: dict[str, Any] = {"kind": elasticity_kind or "none"}
    for key, value in (("min", min_workers), ("max", max_workers)):
        if value is not None:
            elasticity[key] = value
    if elasticity["kind"] in ("elastic", "fully_elastic") and "max" not in elasticity:
        raise click.UsageError(f"--elasticity {elasticity['kind']} needs --max N")
    admission = _admission(max_depth, on_full, locality_wait_s)
    with plane_session(url, token, namespace) as plane:
        info = plane.create_queue(
            name, kind=kind, description=description, elasticity=elasticity, admission=admission
        )
    report(as_json, info, f"created queue {info.name} ({info.kind}) in {info.namespace}")


def _admission(
    max_depth: int | None, on_full: str | None, locality_wait_s: float | None
) -> dict[str, Any]:
    admission: dict[str, Any] = {}
    if max_depth is not None:
        admission["max_depth"] = max_depth
    if on_full is not None:
        admission["on_full"] = on_full
    if locality_wait_s is not None:
        admission["locality_wait_s"] = locality_wait_s
    return admission


#: `queues show`'s members: the worker's id, a second ULID, only with `--wide`.
MEMBER_COLUMNS = (
    Column("member"),
    Column("state"),
    Column("host"),
    Column("id", wide=True),
    Column("queues"),  # last: folds at its commas
)


@queues.command("show")
@click.argument("name")
@wide_option
@json_option
@plane_options
def show(
    name: str,
    wide: bool,
    as_json: bool,
    url: str | None,
    token: str | None,
    namespace: str | None,
) -> None:
    """The full queue row and the workers pulling from it now."""
    with plane_session(url, token, namespace) as plane:
        info = plane.queue(name)
        members = _members(plane, name)
    if as_json:
        emit_json({**asdict(info), "members": [asdict(m) for m in members]})
        return
    _print_queue(info)
    if not members:
        click.echo("members: none")
        return
    click.echo("members")
    print_table(
        MEMBER_COLUMNS,
        (
            (w.name, w.state, w.host or "", w.id, ", ".join(w.queues) or "(default)")
            for w in members
        ),
        wide=wide,
    )


@queues.command("patch")
@click.argument("name")
@_depth_options
@click.option("--description", default=None, help="Free text.")
@_locality_option
@click.option(
    "--resources",
    "resources",
    default=None,
    help='The request of a job submitted without one, as JSON: \'{"gpus": 1, "gpu_type": '
    '"H100"}\' ({} for none).',
)
@click.option("--kind", "kind", default=None, hidden=True)
@click.option("--elasticity", "elasticity", default=None, hidden=True)
@json_option
@plane_options
def patch(
    name: str,
    max_depth: int | None,
    on_full: str | None,
    description: str | None,
    locality_wait_s: float | None,
    resources: str | None,
    kind: str | None,
    elasticity: str | None,
    as_json: bool,
    url: str | None,
    token: str | None,
    namespace: str | None,
) -> None:
    """Change a queue in place (not its kind or elasticity kind)."""
    if kind is not None or elasticity is not None:
        raise click.UsageError(
            "patch cannot change --kind or --elasticity: PATCH the queue's elasticity object "
            "over HTTP, or recreate the queue"
        )
    changes: dict[str, Any] = {}
    admission = _admission(max_depth, on_full, locality_wait_s)
    if admission:
        changes["admission"] = admission
    if description is not None:
        changes["description"] = description
    if resources is not None:
        changes["resources"] = _json_object(resources, "--resources")
    if not changes:
        raise click.UsageError(
            "nothing to patch: pass --max-depth, --on-full, --locality-wait-s, --resources or "
            "--description"
        )
    with plane_session(url, token, namespace) as plane:
        info = plane.patch_queue(name, changes)
    if as_json:
        emit_json(info)
    else:
        _print_queue(info)


def _lifecycle(action: str, help_text: str) -> None:
    @queues.command(action, help=help_text)
    @click.argument("name")
    @json_option
    @plane_options
    def command(
        name: str, as_json: bool, url: str | None, token: str | None, namespace: str | None
    ) -> None:
        with plane_session(url, token, namespace) as plane:
            info = plane.set_queue_state(name, action)
        report(as_json, info, f"queue {info.name}: {info.state}")


_lifecycle("archive", "Soft-delete NAME: keep the row, refuse submits and claims.")
_lifecycle("unarchive", "Back to active (reverses archive and drain).")
_lifecycle("drain", "Stop admitting submits to NAME; in-flight work finishes.")


@queues.command("rm")
@click.argument("name")
@click.option("--force", is_flag=True, help="Scrub NAME out of every worker's queues first.")
@json_option
@plane_options
def rm(
    name: str,
    force: bool,
    as_json: bool,
    url: str | None,
    token: str | None,
    namespace: str | None,
) -> None:
    """Hard-delete NAME; refused while workers are members unless --force."""
    with plane_session(url, token, namespace) as plane:
        plane.delete_queue(name, force=force)
        ns = plane.namespace
    report(
        as_json,
        {"queue": name, "namespace": ns, "deleted": True, "forced": force},
        f"deleted queue {name}",
    )


@queues.command("events")
@click.argument("name")
@click.option("--verbose", "-v", is_flag=True, help="Include each event's detail.")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@json_option
@plane_options
def events(
    name: str,
    verbose: bool,
    limit: int,
    as_json: bool,
    url: str | None,
    token: str | None,
    namespace: str | None,
) -> None:
    """What happened to NAME, newest first (created, patched, drained, scaled, ...)."""
    with plane_session(url, token, namespace) as plane:
        rows = plane.events(name, limit=limit)
    if not verbose:
        rows = [{k: v for k, v in r.items() if k != "detail"} for r in rows]
    if as_json:
        emit_json(rows)
        return
    columns = [Column("at"), Column("event"), *([Column("detail")] if verbose else [])]
    print_table(  # the detail, last, folds onto lines of its own at 80 columns
        columns,
        (
            (when(r["at"]), str(r["kind"]), json.dumps(r.get("detail", {}), sort_keys=True))
            for r in rows
        ),
    )


@queues.command("stats")
@click.argument("name")
@json_option
@plane_options
def stats(
    name: str, as_json: bool, url: str | None, token: str | None, namespace: str | None
) -> None:
    """daemon_count / utilization / pending for NAME."""
    with plane_session(url, token, namespace) as plane:
        figures = plane.stats(name)
        # desired vs actual (cli/controller.py)
        figures.update(controller_figures(plane, name, figures.get("daemon_count")))
    if as_json:
        emit_json(figures)
        return
    print_pairs(
        (key, f"{value:.0%}" if key == "utilization" else "-" if value is None else value)
        for key, value in figures.items()
    )


def _attach_prune() -> None:
    from .prune import prune

    queues.add_command(prune)


_attach_prune()
