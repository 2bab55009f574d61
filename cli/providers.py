"""`lakeshore providers` (named provider configs) and `lakeshore daemon launch / stop`.

A provider config is stored once per namespace and named everywhere else (queue policies,
`daemon launch --provider`). `daemon launch` builds the provider here, on the machine running
the CLI (the local provider starts processes on it; ec2 needs AWS credentials on it), and names
the daemons NAME-00, NAME-01, ...; `--wait` follows their registration on the plane.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from dreamlake.lakeshore.home import home
from dreamlake.lakeshore.plane.base import Plane
from dreamlake.lakeshore.plane.options import plane_options, plane_session
from dreamlake.lakeshore.plane.providers import ProviderInfo
from dreamlake.lakeshore.providers import registry
from dreamlake.lakeshore.providers.base import (
    TAG_GROUP,
    TAG_NAMESPACE,
    Instance,
    LaunchSpec,
    Provider,
    ProviderError,
)
from dreamlake.lakeshore.shapes import launch_shape

from .output import emit_json, hidden_alias, json_option, report
from .params import seconds
from .table import Column, print_table

#: How often `--wait` re-reads the worker rows.
POLL_S = 0.25


def _setting(values: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"settings look like key=value, got {item!r}")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
        except RecursionError:
            raise click.BadParameter(
                f"the value of {key!r} is nested too deeply to be a setting", param_hint="--set"
            ) from None
    return out


def _kind(value: str) -> str:
    """A provider kind this machine has a plugin for: `daemon launch` builds it here."""
    kinds = registry.kinds()
    if value not in kinds:
        hint = "" if "ec2" in kinds else " (ec2 needs: pip install 'dreamlake-lakeshore[ec2]')"
        raise click.BadParameter(
            f"unknown provider kind {value!r}; installed here: {', '.join(kinds) or 'none'}{hint}",
            param_hint="'--kind'",
        )
    return value


@click.group("providers")
def providers() -> None:
    """Named provider configs: where daemons are launched (local processes, EC2, ...)."""


@providers.command("add")
@click.argument("name")
@click.option(
    "--kind",
    required=True,
    callback=lambda ctx, param, value: _kind(value),
    help="Provider plugin: one installed here (local, slurm; ec2 with the ec2 extra).",
)
@click.option("--region", default=None, help="ec2: AWS region.")
@click.option("--instance-type", default=None, help="ec2: instance type.")
@click.option("--ami", default=None, help="ec2: image id.")
@click.option("--spot", is_flag=True, default=None, help="ec2: spot, falling back to on-demand.")
@click.option("--partition", default=None, help="slurm: the partition jobs are submitted to.")
@click.option("--account", default=None, help="slurm: the account jobs are charged to.")
@click.option("--qos", default=None, help="slurm: the jobs' quality of service.")
@click.option(
    "--spot-fallback-after",
    type=int,
    default=None,
    metavar="N",
    help="ec2: the controller launches on-demand once N of a pool's instances were reclaimed "
    "within an hour.",
)
@click.option(
    "--set",
    "extra",
    multiple=True,
    metavar="KEY=VALUE",
    help="Any other setting (JSON values accepted), e.g. --set concurrency=4.",
)
@click.option("--json", "as_json", is_flag=True, help="JSON output for scripts.")
@plane_options
def add(
    name: str,
    kind: str,
    region: str | None,
    instance_type: str | None,
    ami: str | None,
    spot: bool | None,
    partition: str | None,
    account: str | None,
    qos: str | None,
    spot_fallback_after: int | None,
    extra: tuple[str, ...],
    as_json: bool,
    url: str | None,
    token: str | None,
    namespace: str | None,
) -> None:
    """Store provider config NAME in the namespace."""
    config = _setting(extra)
    for key, value in (
        ("region", region),
        ("instance_type", instance_type),
        ("ami", ami),
        ("spot", spot),
        ("partition", partition),
        ("account", account),
        ("qos", qos),
        ("spot_fallback_after", spot_fallback_after),
    ):
        if value is not None:
            config[key] = value
    if kind == "ec2":
        missing = [f"--{k.replace('_', '-')}" for k in ("region", "instance_type", "ami")]
        missing = [m for m in missing if m.lstrip("-").replace("-", "_") not in config]
        if missing:
            raise click.UsageError(f"--kind ec2 needs {', '.join(missing)}")
        from dreamlake.lakeshore.providers.ec2 import check_config

        try:
            check_config(config)
        except ProviderError as exc:
            raise click.UsageError(str(exc)) from None
    if kind == "slurm":
        _check_slurm(config)
    with plane_session(url, token, namespace) as plane:
        info = plane.add_provider(name, kind, config)
    report(as_json, info, f"added provider {info.name} ({info.kind}) in {info.namespace}")


def _check_slurm(config: dict[str, Any]) -> None:
    """The slurm plugin's own check, before anything is stored: it names the bad setting."""
    from dreamlake.lakeshore.providers.base import ProviderError
    from dreamlake.lakeshore.providers.slurmscript import check_config

    try:
        check_config(config)
    except ProviderError as exc:
        raise click.UsageError(f"--kind slurm: {exc}") from None


@providers.command("ls")
@click.option("--json", "as_json", is_flag=True, help="JSON output for scripts.")
@plane_options
def ls(as_json: bool, url: str | None, token: str | None, namespace: str | None) -> None:
    """The namespace's provider configs."""
    with plane_session(url, token, namespace) as plane:
        rows = plane.providers()
    if as_json:
        emit_json([_with_shape(r) for r in rows])
        return
    shapes = [launch_shape(r.kind, r.config) for r in rows]
    print_table(  # the config, last, folds onto lines of its own at 80 columns
        (Column("name"), Column("kind"), Column("launch shape"), Column("config")),
        (
            (
                r.name,
                r.kind,
                shape.describe() if shape else "-",
                ", ".join(f"{k}={v}" for k, v in sorted(r.config.items())),
            )
            for r, shape in zip(rows, shapes, strict=True)
        ),
    )


def _with_shape(info: ProviderInfo) -> dict[str, Any]:
    """The config, and what each launch offers as the config and the tables say (`null`:
    not known here; the controller may still learn it, say from EC2)."""
    shape = launch_shape(info.kind, info.config)
    return {
        **dataclasses.asdict(info),
        "launch_shape": None if shape is None else {**shape.as_dict(), "source": shape.source},
    }


hidden_alias(providers, "ls", "list")


@providers.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="JSON output for scripts.")
@plane_options
def show(
    name: str, as_json: bool, url: str | None, token: str | None, namespace: str | None
) -> None:
    """One provider config."""
    with plane_session(url, token, namespace) as plane:
        info = plane.provider(name)
    if as_json:
        emit_json(_with_shape(info))
        return
    shape = launch_shape(info.kind, info.config)
    table = Table(show_header=False, box=None)
    table.add_row("name", info.name)
    table.add_row("namespace", info.namespace)
    table.add_row("kind", info.kind)
    table.add_row(
        "launch shape",
        f"{shape.describe()} (from {shape.source})" if shape else "- (not stated: sized in jobs)",
    )
    for key, value in sorted(info.config.items()):
        table.add_row(key, json.dumps(value))
    Console().print(table)


@providers.command("rm")
@click.argument("name")
@json_option
@plane_options
def rm(name: str, as_json: bool, url: str | None, token: str | None, namespace: str | None) -> None:
    """Remove provider config NAME (running daemons are left alone)."""
    with plane_session(url, token, namespace) as plane:
        plane.delete_provider(name)
        ns = plane.namespace
    report(
        as_json, {"provider": name, "namespace": ns, "deleted": True}, f"removed provider {name}"
    )


# -- lakeshore daemon launch / stop -----------------------------------------------------------


def _build(info: ProviderInfo) -> Provider:
    return registry.build(info.kind, info.name, info.config)


def _plane_target(url: str | None) -> str:
    """How launched daemons reach the plane this CLI talks to."""
    return url or str(home() / "lakeshore.db")


@click.command("launch")
@click.option("--provider", "provider_name", required=True, help="A provider config's name.")
@click.option("--queue", "-q", "queues", multiple=True, metavar="QUEUE", help="Repeatable.")
@click.option("--count", type=click.IntRange(1, 1000), default=1, show_default=True)
@click.option("--name", required=True, help="Daemons are named NAME-00, NAME-01, ...")
@click.option("--wait", is_flag=True, help="Block until every daemon has registered.")
@click.option("--timeout-s", type=seconds(0), default=600.0, show_default=True)
@json_option
@plane_options
def launch(
    provider_name: str,
    queues: tuple[str, ...],
    count: int,
    name: str,
    wait: bool,
    timeout_s: float,
    as_json: bool,
    url: str | None,
    token: str | None,
    namespace: str | None,
) -> None:
    """Start COUNT daemons through a provider; with --wait, follow them until they register."""
    with plane_session(url, token, namespace) as plane:
        info = plane.provider(provider_name)
        spec = LaunchSpec(
            namespace=plane.namespace,
            queues=tuple(queues),
            name=name,
            target=f"cli/{name}",
            owner="cli",
            settings=info.config,
            plane_url=_plane_target(url),
            plane_token=token,
        )
        names = spec.daemon_names(count)
        for n in names:  # refuse a bad name before anything starts
            from dreamlake.lakeshore.types import check_name

            check_name(n, "daemon")
        provider = _build(info)
        instances = provider.launch(spec, count)
        # With --json, stdout is the one JSON document; the progress goes to stderr.
        click.echo(
            f"launched {len(instances)} daemon(s) via {info.name}: {', '.join(names)}",
            err=as_json,
        )
        if wait:
            _wait_registered(plane, names, timeout_s, provider, instances, stderr=as_json)
    if as_json:
        emit_json(
            {
                "provider": info.name,
                "namespace": spec.namespace,
                "daemons": names,
                "instances": [i.id for i in instances],
                "registered": wait,
            }
        )


def _wait_registered(
    plane: Plane,
    names: list[str],
    timeout_s: float,
    provider: Provider,
    instances: list[Instance],
    *,
    stderr: bool = False,
) -> None:
    """Until every daemon registered; fails at once when an instance dies before it does."""
    deadline = time.monotonic() + timeout_s
    with Progress(
        TextColumn("[bold]registering"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        transient=False,
        console=Console(stderr=stderr),
    ) as progress:
        task = progress.add_task("daemons", total=len(names))
        while True:
            live = {w.name for w in plane.workers() if w.state == "alive"}
            done = sum(1 for n in names if n in live)
            progress.update(task, completed=done)
            if done == len(names):
                return
            alive = {i.id for i in provider.list() if i.state != "reclaimed"}
            dead = [i.daemon for i in instances if i.id not in alive and i.daemon not in live]
            if dead:
                raise click.ClickException(
                    f"{len(dead)} daemon(s) exited before registering: {', '.join(dead)} "
                    "(see the provider's log for the daemon's own message)"
                )
            if time.monotonic() > deadline:
                missing = [n for n in names if n not in live]
                raise click.ClickException(
                    f"{len(missing)} daemon(s) not registered after {timeout_s:g}s: "
                    + ", ".join(missing)
                )
            time.sleep(POLL_S)


def _launched_rows(plane: Plane, name: str) -> list[Any]:
    pattern = re.compile(rf"^{re.escape(name)}(-\d+)?$")
    return [w for w in plane.workers() if pattern.fullmatch(w.name)]


@click.command("stop")
@click.argument("name")
@click.option(
    "--timeout-s",
    type=seconds(0),
    default=60.0,
    show_default=True,
    help="How long the daemons may take to drain before their instances are terminated.",
)
@json_option
@plane_options
def stop(
    name: str,
    timeout_s: float,
    as_json: bool,
    url: str | None,
    token: str | None,
    namespace: str | None,
) -> None:
    """Drain daemon NAME (or all of a launch's NAME-NN), then terminate their instances."""
    with plane_session(url, token, namespace) as plane:
        rows = _launched_rows(plane, name)
        for row in rows:
            plane.set_worker_state(row.id, "draining")
        drained = ", ".join(r.name for r in rows) or "-"
        click.echo(f"draining {len(rows)} daemon(s): {drained}", err=as_json)
        deadline = time.monotonic() + timeout_s
        while _live(plane, rows) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        stopped: list[str] = []
        for info in plane.providers():
            try:
                provider = _build(info)
                found = provider.list({TAG_NAMESPACE: plane.namespace, TAG_GROUP: name})
                found += [
                    i
                    for i in provider.list({TAG_NAMESPACE: plane.namespace})
                    if i.daemon == name and i not in found
                ]
            except Exception as exc:
                click.echo(f"provider {info.name}: cannot list instances ({exc})", err=True)
                continue
            if found:
                provider.terminate([i.id for i in found])
                stopped += [i.id for i in found]
        click.echo(f"terminated {len(stopped)} instance(s)", err=as_json)
        if not rows and not stopped:
            raise click.ClickException(
                f"no daemon named {name!r} (nor a launch {name!r} of NAME-NN daemons) in "
                f"namespace '{plane.namespace}': see `lakeshore daemon ls`"
            )
        if as_json:
            emit_json(
                {
                    "name": name,
                    "namespace": plane.namespace,
                    "drained": [r.name for r in rows],
                    "terminated": stopped,
                }
            )


def _live(plane: Plane, rows: list[Any]) -> bool:
    ids = {r.id for r in rows}
    return any(w.id in ids and w.state != "gone" for w in plane.workers())
