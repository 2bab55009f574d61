"""`lakeshore-controller`: the elastic controller as a process, one leader per plane.

    lakeshore-controller --store ~/.lakeshore/lakeshore.db --interval-s 5 --max-workers 64

Several may run: each contends for the plane's leader lock (a Postgres advisory lock, or a file
lock beside the SQLite database) before every tick, and a loser waits as a hot standby that
takes over within one interval of the leader's exit. SIGTERM / SIGINT finish the current tick.

Every option can also come from the environment as LAKESHORE_CONTROLLER_<OPTION>
(LAKESHORE_CONTROLLER_INTERVAL_S=10), as the daemon's options come from LAKESHORE_DAEMON_<OPTION>;
the older names LAKESHORE_STORE, LAKESHORE_URL (for --plane-url), LAKESHORE_TOKEN (for
--plane-token) and LAKESHORE_TOKEN_FILE (for --plane-token-file) are still read after the new
ones. Tokens are best given by file or environment: a command line is every user's to read.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import click

from dreamlake.lakeshore import __version__
from dreamlake.lakeshore.cli.errors import OneLineCommand
from dreamlake.lakeshore.cli.exporter import observability_options, start_exporter
from dreamlake.lakeshore.cli.params import count, seconds
from dreamlake.lakeshore.extras import needs_extra
from dreamlake.lakeshore.home import home
from dreamlake.lakeshore.plane.dispatch import open_store
from dreamlake.lakeshore.plane.http import HttpFleet
from dreamlake.lakeshore.plane.leader import Leader, LeaseLeader, leader_for
from dreamlake.lakeshore.plane.options import IN_PS, token_file_option
from dreamlake.lakeshore.plane.store import SqlStore
from dreamlake.lakeshore.signals import stop_signals

if TYPE_CHECKING:
    from .metrics import ControllerMetrics

LEADER_KEY = "controller"
#: Accepted by --log-level (sdk/logs.py's, repeated here: structlog loads only once it runs).
LEVELS = ("debug", "info", "warning", "error", "critical")
ENV_PREFIX = "LAKESHORE_CONTROLLER"


def _env(option: str, *older: str) -> list[str]:
    """LAKESHORE_CONTROLLER_<OPTION> first, then the names this option was read from before."""
    return [f"{ENV_PREFIX}_{option}", *older]


@click.command(
    cls=OneLineCommand,
    context_settings={
        "help_option_names": ["-h", "--help"],
        "max_content_width": 100,
        # also under `lakeshore controller`, which calls this command's main() itself
        "auto_envvar_prefix": ENV_PREFIX,
        "show_default": True,
    },
)
@click.option(
    "--store",
    envvar=_env("STORE", "LAKESHORE_STORE"),
    show_envvar=True,
    default=None,
    metavar="URL",
    help="The plane's database: a SQLite path or postgresql:// URL "
    "(default: $LAKESHORE_HOME/lakeshore.db).",
)
@click.option(
    "--url",
    default=None,
    metavar="URL",
    help="Run against a control plane over HTTP instead of its database (needs an admin token, "
    "--token; controllers elect one leader through the server).",
)
@click.option(
    "--token",
    envvar=_env("TOKEN"),
    show_envvar=True,
    default=None,
    help=f"Admin token for --url (lakeshore tokens create --admin). {IN_PS}",
)
@token_file_option(envvar=_env("TOKEN_FILE"))
@click.option("--interval-s", type=seconds(0.01), default=5.0, show_default=True)
@click.option(
    "--max-workers",
    type=count(0),
    default=None,
    help="Global cap on managed daemons; shared out cheapest cost_weight first.",
)
@click.option(
    "--scale-down-window-s",
    type=seconds(0),
    default=300.0,
    show_default=True,
    help="Stabilisation window before scaling down (fully_elastic queues use idle_s).",
)
@click.option("--boot-timeout-s", type=seconds(0), default=600.0, show_default=True)
@click.option("--drain-timeout-s", type=seconds(0), default=1800.0, show_default=True)
@click.option(
    "--reclaim-grace-s",
    type=seconds(0),
    default=180.0,
    show_default=True,
    help="How long a VM whose daemon left on its own is left for its provider to reclaim.",
)
@click.option(
    "--plane-url",
    envvar=_env("PLANE_URL", "LAKESHORE_URL"),
    show_envvar=True,
    default=None,
    help="Where launched daemons reach the plane (default: the --store SQLite file).",
)
@click.option(
    "--plane-token",
    envvar=_env("PLANE_TOKEN", "LAKESHORE_TOKEN"),
    show_envvar=True,
    default=None,
    help="Token for launched daemons (handed to them in their environment, never on their "
    f"command line). {IN_PS.replace('--token-file', '--plane-token-file')}",
)
@token_file_option(
    token="plane_token",
    flag="--plane-token-file",
    envvar=_env("PLANE_TOKEN_FILE", "LAKESHORE_TOKEN_FILE"),
)
@click.option("--once", is_flag=True, help="Run one tick (if leading) and exit.")
@click.option("--log-level", type=click.Choice(LEVELS, case_sensitive=False), default="info")
@observability_options
@click.version_option(__version__, prog_name="lakeshore-controller")
def controller_command(
    store: str | None,
    url: str | None,
    token: str | None,
    interval_s: float,
    max_workers: int | None,
    scale_down_window_s: float,
    boot_timeout_s: float,
    drain_timeout_s: float,
    reclaim_grace_s: float,
    plane_url: str | None,
    plane_token: str | None,
    once: bool,
    log_level: str,
    log_json: bool | None,
    metrics_port: int,
    metrics_addr: str,
) -> None:
    """Scale worker daemons to each queue's elasticity policy, through provider plugins."""
    with needs_extra("lakeshore-controller", "controller"):
        from dreamlake.lakeshore import logs

        from .loop import Controller, Settings

    logs.configure(json=log_json, level=log_level)
    if url and store:
        raise click.UsageError("give --store (the database) or --url (a server), not both")
    target = url or store or str(home() / "lakeshore.db")
    is_postgres = target.startswith(("postgresql://", "postgres://"))
    settings = Settings(
        interval_s=interval_s,
        max_workers=max_workers,
        scale_down_window_s=scale_down_window_s,
        boot_timeout_s=boot_timeout_s,
        drain_timeout_s=drain_timeout_s,
        reclaim_grace_s=reclaim_grace_s,
        plane_url=plane_url or (None if is_postgres else target),
        plane_token=plane_token,
    )
    plane_store: SqlStore | HttpFleet
    if url:
        plane_store = HttpFleet(url, token=token)
        # The lease outlasts two missed ticks, and is renewed by every tick.
        leader: Leader = LeaseLeader(plane_store, LEADER_KEY, ttl_s=max(3 * interval_s, 10.0))
    else:
        plane_store = open_store(target, create=False)  # a typo must not make an empty plane
        leader = leader_for(target, LEADER_KEY)
    stop = threading.Event()

    def on_signal(signum: int) -> None:
        stop.set()  # from the relay thread of stop_signals, never inside the handler

    try:
        with stop_signals(on_signal, on_signal):
            metrics = _metrics(metrics_port, metrics_addr)
            controller = Controller(plane_store, settings, observer=metrics)
            if once:
                if leader.try_acquire():
                    if metrics is not None:
                        metrics.leading(True)
                    for d in controller.tick():
                        click.echo(
                            f"{d.namespace} {d.target}: {d.current} -> {d.desired} ({d.reason})"
                        )
                else:
                    click.echo("another controller leads; did nothing", err=True)
                return
            controller.run(stop, leader)
    finally:
        leader.close()
        plane_store.close()


def _metrics(port: int, addr: str) -> ControllerMetrics | None:
    def load() -> ControllerMetrics:
        from .metrics import ControllerMetrics

        return ControllerMetrics()

    started = start_exporter(load, port, addr, script="lakeshore-controller", extra="controller")
    if started is None:
        return None
    from dreamlake.lakeshore.logs import EventLog

    EventLog("lakeshore.controller").info("controller.metrics_serving", addr=addr, port=started[1])
    return started[0]


def main() -> None:
    controller_command.main(prog_name="lakeshore-controller")
