"""`lakeshore daemon`: see and steer the worker daemons through their worker rows.

The daemons read their own rows, so every verb here is a write to the plane, never a message to a
process: `update` changes membership (picked up at the daemon's next poll, no restart) and `drain`
sets the row's state (the daemon sees it at its next heartbeat, finishes its jobs and exits).
"""

from __future__ import annotations

import time
from typing import Any

import click

from dreamlake.lakeshore.plane.options import plane_options, plane_session
from dreamlake.lakeshore.types import WorkerInfo

from .output import emit_json, hidden_alias, json_option
from .params import seconds
from .table import Column, print_table, wide_option


class _DaemonGroup(click.Group):
    """`daemon launch` and `daemon stop` live with the provider configs they start daemons from
    (cli/providers.py, which imports rich and the provider registry): loaded when one of them,
    or the list of subcommands, is asked for, so `daemon ls` starts without them."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            self._add_provider_verbs()
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._add_provider_verbs()
        return super().list_commands(ctx)

    def _add_provider_verbs(self) -> None:
        # The group adds them (cli/providers.py does not import this module), so neither
        # module imports the other at load time and `daemon ls` loads no provider code.
        from .providers import launch, stop

        self.add_command(launch)
        self.add_command(stop)


@click.group("daemon", cls=_DaemonGroup)
def daemon() -> None:
    """Worker daemons: ls, show, change membership, drain."""


def _queues(row: WorkerInfo) -> str:
    return ",".join(row.queues) or "default"


def _age(ts: float) -> str:
    seconds = max(0.0, time.time() - ts)
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


def _slots(row: WorkerInfo) -> tuple[int, int]:
    total = int(row.info.get("concurrency", len(row.load.get("slots", [])) or 1))
    return int(row.load.get("busy", 0)), total


def _failed_gpus(row: WorkerInfo) -> str:
    """The GPUs the daemon took out of its offer (NVML said they failed), and why; '-': none."""
    failed = row.load.get("gpus_failed") or []
    return ", ".join(f"{g['index']} ({g['reason']})" for g in failed) or "-"


def worker_json(row: WorkerInfo) -> dict[str, Any]:
    busy, total = _slots(row)
    return {
        "id": row.id,
        "name": row.name,
        "namespace": row.namespace,
        "state": row.state,
        "queues": row.queues,
        "host": row.host,
        "pid": row.pid,
        "slots": total,
        "busy": busy,
        "gpus": row.info.get("gpus", []),
        "gpus_failed": row.load.get("gpus_failed", []),
        "labels": row.info.get("labels", {}),
        "version": row.info.get("version"),
        "heartbeat_at": row.heartbeat_at,
        "created_at": row.created_at,
        "info": row.info,
        "load": row.load,
    }


#: `daemon ls`: a hostname-long name, its queues, slots and heartbeat fit 80 columns.
LS_COLUMNS = (
    Column("name"),
    Column("state"),
    Column("queues"),
    Column("slots"),
    Column("gpus"),
    Column("heartbeat"),
    Column("host", wide=True),
    Column("failed-gpus", wide=True),
)


@daemon.command("ls")
@plane_options
@wide_option
@click.option("--json", "as_json", is_flag=True, help="JSON for scripts.")
def ls(
    url: str | None, token: str | None, namespace: str | None, wide: bool, as_json: bool
) -> None:
    """Live worker daemons of the namespace (rows marked gone are left out)."""
    with plane_session(url, token, namespace) as plane:
        rows = plane.workers()
    if as_json:
        emit_json([worker_json(r) for r in rows])
        return
    # Plain aligned columns, without rich's ~50 ms import (issue 17, item 5): see cli/table.py.
    print_table(
        LS_COLUMNS,
        (
            (
                r.name,
                r.state,
                _queues(r),
                "{}/{}".format(*_slots(r)),
                str(len(r.info.get("gpus", []))),
                _age(r.heartbeat_at),
                f"{r.host or '?'}:{r.pid or '?'}",
                _failed_gpus(r),
            )
            for r in rows
        ),
        wide=wide,
    )


hidden_alias(daemon, "ls", "list")


#: `daemon show`'s GPUs: the UUID (40 characters) only with `--wide`; why one failed folds.
GPU_COLUMNS = (
    Column("gpu"),
    Column("model"),
    Column("memory"),
    Column("uuid", wide=True),
    Column("health"),
)
#: `daemon show`'s slots: the job in each, with its ULID, fits 80 columns.
SLOT_COLUMNS = (
    Column("slot"),
    Column("state"),
    Column("invocation"),
    Column("queue"),
    Column("running"),
    Column("gpus"),
    Column("attempt", wide=True),
    Column("pid", wide=True),
)


def _running(since: Any) -> str:
    """How long a slot's job has run, '-' where the heartbeat gave no start time."""
    if not isinstance(since, (int, float)) or isinstance(since, bool):
        return "-"
    return f"{time.time() - since:.0f}s"


def _figure(load: dict[str, Any], key: str) -> str:
    """A percentage from a heartbeat's load, '-' where it has none: a worker other than
    lakeshore-daemon (a `run_worker` loop, a client of the HTTP API) may send any load."""
    value = load.get(key)
    return f"{value}%" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


@daemon.command("show")
@click.argument("name")
@plane_options
@wide_option
@click.option("--json", "as_json", is_flag=True, help="JSON for scripts.")
def show(
    name: str, url: str | None, token: str | None, namespace: str | None, wide: bool, as_json: bool
) -> None:
    """One daemon: queues, host, GPUs, slots and the jobs running in them."""
    with plane_session(url, token, namespace) as plane:
        row = plane.worker(name)
    if as_json:
        emit_json(worker_json(row))
        return
    busy, total = _slots(row)
    load = row.load
    lines = [
        f"name:       {row.name}  ({row.id})",
        f"state:      {row.state}",
        f"queues:     {_queues(row)}",
        f"host:       {row.host}  pid {row.pid}  version {row.info.get('version', '?')}",
        f"cpus:       {row.info.get('cpus', '?')}  memory {row.info.get('memory_mb', '?')} MiB",
        f"heartbeat:  {_age(row.heartbeat_at)}"
        + (
            f"  cpu {_figure(load, 'cpu_percent')}  mem {_figure(load, 'memory_percent')}"
            if load
            else ""
        ),
        f"slots:      {busy}/{total} busy",
    ]
    labels = row.info.get("labels") or {}
    if labels:
        lines.append("labels:     " + ", ".join(f"{k}={v}" for k, v in sorted(labels.items())))
    gpus = row.info.get("gpus") or []
    lines.append(f"gpus:       {len(gpus) or 'none'}")
    click.echo("\n".join(lines))
    failed = {g.get("index"): g.get("reason", "?") for g in load.get("gpus_failed") or []}
    if gpus:
        print_table(
            GPU_COLUMNS,
            (
                (
                    g.get("index", "?"),
                    g.get("name", "?"),
                    f"{g.get('memory_mb', '?')} MiB",
                    g.get("uuid", "?"),
                    f"FAILED: {failed[g['index']]}" if g.get("index") in failed else "ok",
                )
                for g in gpus
            ),
            wide=wide,
        )
    slots = load.get("slots") or []
    if slots:
        print_table(
            SLOT_COLUMNS,
            (
                (
                    str(s.get("index", "-")),
                    s.get("state") or "-",
                    s.get("invocation") or "-",
                    s.get("queue") or "-",
                    _running(s.get("since")),
                    ",".join(str(g) for g in s.get("gpus", [])) or "-",
                    str(s.get("attempt") or "-"),
                    str(s.get("pid") or "-"),
                )
                for s in slots
            ),
            wide=wide,
        )


@daemon.command("update")
@click.argument("name")
@click.option("--add-queue", "add", multiple=True, metavar="QUEUE", help="Serve this queue too.")
@click.option("--remove-queue", "remove", multiple=True, metavar="QUEUE", help="Stop serving it.")
@click.option(
    "--force", is_flag=True, help="Allow removing its last queue (it then idles, claiming nothing)."
)
@json_option
@plane_options
def update(
    name: str,
    add: tuple[str, ...],
    remove: tuple[str, ...],
    force: bool,
    as_json: bool,
    url: str | None,
    token: str | None,
    namespace: str | None,
) -> None:
    """Change a daemon's queues; it picks them up at its next poll, without a restart."""
    if not add and not remove:
        raise click.UsageError("nothing to change: pass --add-queue and/or --remove-queue")
    with plane_session(url, token, namespace) as plane:
        before = plane.worker(name).queues
        left = set(before) - set(remove) | set(add)
        if not left and not force:
            raise click.UsageError(
                f"that removes {name}'s last queue: it would idle, serving nothing "
                "(pass --force to do it anyway, or --add-queue another)"
            )
        row = plane.update_worker_queues(name, add=add, remove=remove)
    if as_json:
        emit_json(
            {
                "daemon": row.name,
                "id": row.id,
                "queues_before": before,
                "queues": row.queues,
                "added": sorted(set(row.queues) - set(before)),
                "removed": sorted(set(before) - set(row.queues)),
            }
        )
    else:
        click.echo(f"{row.name}: queues {_queues(row)}")


@daemon.command("drain")
@click.argument("name")
@plane_options
@click.option(
    "--wait",
    "wait_s",
    type=seconds(0),
    default=None,
    metavar="SECONDS",
    help="Wait up to this long for the daemon to finish and leave.",
)
@click.option(
    "--preempt",
    is_flag=True,
    help="The box is going away: its jobs are told (dls.run.preempting), get the daemon's "
    "--preempt-grace-s to checkpoint, and go back to the queue as preemptions.",
)
@json_option
def drain(
    name: str,
    url: str | None,
    token: str | None,
    namespace: str | None,
    wait_s: float | None,
    preempt: bool,
    as_json: bool,
) -> None:
    """Ask a daemon to stop claiming, finish its jobs and exit (seen at its next heartbeat).

    With --json the state lines go to stderr and stdout gets one object: the state before and
    after (`gone` once it left, with --wait).
    """
    with plane_session(url, token, namespace) as plane:
        before = plane.worker(name).state
        target = "preempting" if preempt else "draining"
        row = plane.set_worker_state(name, target)
        click.echo(f"{row.name}: {target}", err=as_json)
        state = row.state
        if wait_s is not None:
            deadline = time.monotonic() + wait_s
            while (state := plane.worker(row.id).state) != "gone":
                if time.monotonic() > deadline:
                    raise click.ClickException(f"{row.name} still running after {wait_s:g}s")
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
            click.echo(f"{row.name}: gone", err=as_json)
    if as_json:
        emit_json({"daemon": row.name, "id": row.id, "state_before": before, "state": state})
