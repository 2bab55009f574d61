"""`lakeshore-daemon`: the command line of the worker daemon.

Every option can also come from the environment as LAKESHORE_DAEMON_<OPTION> (click's
auto_envvar_prefix: LAKESHORE_DAEMON_CONCURRENCY=4), so a systemd EnvironmentFile configures a
box without editing the unit; --url, --token, --token-file and --namespace read LAKESHORE_URL,
LAKESHORE_TOKEN, LAKESHORE_TOKEN_FILE and LAKESHORE_NAMESPACE like every other Lakeshore command.
Once read, the token and the signing key leave the environment the daemon's jobs inherit.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from dreamlake.lakeshore import __version__, signing
from dreamlake.lakeshore.cli.errors import OneLineCommand
from dreamlake.lakeshore.cli.exporter import observability_options, start_exporter
from dreamlake.lakeshore.cli.params import Finite, seconds
from dreamlake.lakeshore.errors import DispatchError
from dreamlake.lakeshore.plane.default import open_plane
from dreamlake.lakeshore.plane.options import plane_options
from dreamlake.lakeshore.plane.transport import CHANNEL_MODES, ChannelMode
from dreamlake.lakeshore.storage import open_storage
from dreamlake.lakeshore.types import DEFAULT_QUEUE, check_name
from dreamlake.lakeshore.work.core import BURST_GIVE_UP_S
from dreamlake.lakeshore.worker import default_name

from . import log
from .credentials import seal_process
from .runtimes import DEFAULT_CACHE_GB
from .systemd import Notifier
from .worker import EXIT_CONFIG, Daemon, DaemonConfig

if TYPE_CHECKING:
    from .metrics import DaemonMetrics


def _labels(values: tuple[str, ...]) -> dict[str, str]:
    labels = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(
                f"labels look like key=value, got {item!r}", param_hint="--label"
            )
        labels[key] = value
    return labels


@click.command(
    cls=OneLineCommand,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option(
    "--queue",
    "-q",
    "queues",
    multiple=True,
    metavar="QUEUE",
    help="Queue to serve (repeat for several). None: the default queue.",
)
@plane_options
@click.option("--name", default=None, help="Worker name (default: <hostname>-<pid>).")
@click.option(
    "--concurrency",
    "-c",
    type=click.IntRange(1, 1024),
    default=None,
    help="Slots: a cap on the jobs run at once, one child process each [default: what the "
    "resources allow: as many as the CPUs (--cpus, else the cores) and at least one per GPU, "
    "so fractional GPU jobs share a GPU; with no GPU and no --cpus, one].",
)
@click.option(
    "--prefetch",
    type=click.IntRange(0, 1000),
    default=0,
    show_default=True,
    help="Jobs claimed ahead of a free slot, in the same request: for streams of short jobs. "
    "0 claims only for free slots, so a long job never holds a queued one.",
)
@click.option(
    "--gpus-per-job",
    type=click.IntRange(0, 64),
    default=0,
    show_default=True,
    help="GPUs a job that asks for none is given (resources gpus), each job's child seeing "
    "exactly its GPUs in CUDA_VISIBLE_DEVICES.",
)
@click.option(
    "--gpus",
    "gpus",
    type=click.IntRange(0, 1024),
    default=None,
    help="GPUs to offer: the first N detected, or N declared ones where fewer are detected "
    "(a CPU box in a test) [default: every GPU detected].",
)
@click.option(
    "--gpu-type",
    default=None,
    metavar="NAME",
    help="The name of declared GPUs (--gpus), which jobs' gpu_type is matched against.",
)
@click.option(
    "--gpu-memory-gb",
    type=Finite(0, 1 << 20),
    default=None,
    help="The memory of each declared GPU (--gpus), for jobs' gpu_memory_gb.",
)
@click.option(
    "--cpus",
    type=Finite(0, 1 << 20),
    default=None,
    help="CPUs that jobs' cpus requests are counted against [default: not counted].",
)
@click.option(
    "--memory-gb",
    type=Finite(0, 1 << 30),
    default=None,
    help="Memory that jobs' memory_gb requests are counted against [default: not counted].",
)
@click.option(
    "--enforce-gpu-memory",
    is_flag=True,
    help="End a job that uses more GPU memory than its share (gpus x the GPU's memory), read "
    "from NVML each second; its neighbours keep running.",
)
@click.option(
    "--runtime-cache-gb",
    type=Finite(0, 1 << 30),
    default=DEFAULT_CACHE_GB,
    show_default=True,
    help="How much of jobs' shipped code this box keeps, least recently used first out "
    "(under $LAKESHORE_HOME/runtime; a running job's is never removed).",
)
@click.option(
    "--advertise-addr",
    default=None,
    metavar="ADDR",
    envvar="LAKESHORE_ADVERTISE_ADDR",
    help="The address other boxes reach this one at, for multi-node jobs' rank 0 "
    "(default: this host's name, resolved).",
)
@click.option(
    "--channel",
    type=click.Choice(CHANNEL_MODES),
    default="push",
    envvar="LAKESHORE_CHANNEL",
    show_default=True,
    help="Keep one channel (a WebSocket) open to the server: `push`, for the server's word "
    "at once (a kill reaches the job in milliseconds, not at the next lease renewal); "
    "`requests`, to send every request over it too (measured slower than keep-alive HTTP "
    "here: `make bench`, suite channel); `off`. A server or proxy that refuses it leaves "
    "the daemon on HTTP alone, said once. Not used on the embedded plane.",
)
@click.option(
    "--handler",
    default=None,
    metavar="MODULE:FN",
    help="Callable that receives plain (non-envelope) payloads.",
)
@click.option("--burst", is_flag=True, help="Exit once the queues are empty.")
@click.option(
    "--give-up-unreachable-s",
    type=seconds(0, low_open=True),
    default=None,
    metavar="SECONDS",
    help="Exit with status 3 once the control plane has been unreachable this long. Default: "
    f"{BURST_GIVE_UP_S:g} with --burst; without --burst the daemon waits for the plane for ever.",
)
@click.option(
    "--lease-s",
    type=seconds(0.5, 3600),
    default=60.0,
    show_default=True,
    help="Lease per claim; renewed while the job runs.",
)
@click.option(
    "--drain-timeout-s",
    type=seconds(0),
    default=60.0,
    show_default=True,
    help="On a drain (daemon drain NAME without --preempt), how long running jobs may "
    "finish before they are released. SIGTERM is a preemption notice: --preempt-grace-s.",
)
@click.option(
    "--kill-grace-s",
    type=seconds(0),
    default=10.0,
    show_default=True,
    help="Between SIGTERM and SIGKILL when a job is killed, timed out or released.",
)
@click.option(
    "--preempt-grace-s",
    type=seconds(0),
    default=30.0,
    show_default=True,
    help="On a preemption notice (SIGTERM, daemon drain --preempt, an EC2 spot notice), how "
    "long running jobs get to checkpoint and stop (never past the notice's own deadline) "
    "before they are killed and requeued as preemptions.",
)
@click.option(
    "--spot-notice",
    type=click.Choice(["auto", "ec2", "none"]),
    default="auto",
    show_default=True,
    help="Watch for spot interruption notices: ec2 polls the instance metadata service "
    "(IMDSv2) every few seconds; auto does so when /sys says this box is an EC2 instance "
    "(no network probe); none never. A rebalance recommendation only stops claiming.",
)
@click.option(
    "--storage",
    default=None,
    metavar="URL",
    help="Spill storage for large payloads (file:///dir or s3://bucket/prefix).",
)
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="KEY=VALUE",
    help="Label on the worker row (repeat), e.g. --label gpu=h100.",
)
@click.option(
    "--signing-key-file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="The server's payload-signing key; claims that do not verify are refused unrun "
    "(default: LAKESHORE_SIGNING_KEY, else $LAKESHORE_HOME/signing.key when present).",
)
@click.option("--log-level", type=click.Choice(log.LEVELS), default="info", show_default=True)
@observability_options
@click.version_option(__version__, prog_name="lakeshore-daemon")
def daemon_command(
    queues: tuple[str, ...],
    url: str | None,
    token: str | None,
    namespace: str | None,
    name: str | None,
    concurrency: int | None,
    prefetch: int,
    gpus_per_job: int,
    gpus: int | None,
    gpu_type: str | None,
    gpu_memory_gb: float | None,
    cpus: float | None,
    memory_gb: float | None,
    enforce_gpu_memory: bool,
    runtime_cache_gb: float,
    advertise_addr: str | None,
    channel: ChannelMode,
    handler: str | None,
    burst: bool,
    give_up_unreachable_s: float | None,
    lease_s: float,
    drain_timeout_s: float,
    kill_grace_s: float,
    preempt_grace_s: float,
    spot_notice: str,
    storage: str | None,
    labels: tuple[str, ...],
    signing_key_file: str | None,
    log_level: str,
    log_json: bool | None,
    metrics_port: int,
    metrics_addr: str,
) -> None:
    """Run jobs from Lakeshore queues on this box, one child process per slot."""
    log.configure(json=log_json, level=log_level)
    try:
        name = check_name(name or default_name(), "worker")
        names = tuple(dict.fromkeys(check_name(q) for q in queues))
    except DispatchError as exc:
        raise click.UsageError(str(exc)) from None
    _check_storage(storage)
    if names == (DEFAULT_QUEUE,):
        names = ()  # the default queue alone is the empty membership, as the plane stores it
    config = DaemonConfig(
        name=name,
        queues=names,
        concurrency=concurrency or 1,
        prefetch=prefetch,
        gpus_per_job=gpus_per_job,
        handler=handler,
        burst=burst,
        give_up_unreachable_s=give_up_unreachable_s or (BURST_GIVE_UP_S if burst else None),
        lease_s=lease_s,
        drain_timeout_s=drain_timeout_s,
        kill_grace_s=kill_grace_s,
        storage=storage,
        labels=_labels(labels),
        signing_key=_signing_key(signing_key_file),
        gpus=gpus,
        gpu_type=gpu_type,
        gpu_memory_gb=gpu_memory_gb,
        cpus=cpus,
        memory_gb=memory_gb,
        auto_concurrency=concurrency is None,
        preempt_grace_s=preempt_grace_s,
        spot_notice=None if spot_notice == "none" else spot_notice,
        enforce_gpu_memory=enforce_gpu_memory,
        runtime_cache_gb=runtime_cache_gb,
        advertise_addr=advertise_addr,
    )
    try:
        plane = open_plane(url, token, namespace, channel=channel)
    except DispatchError as exc:
        log.get_logger().error("daemon.plane_error", error=str(exc))
        raise PlaneRefused(f"{type(exc).__name__}: {exc}") from None
    seal_process()  # the token and key are read: none of it reaches a job (credentials.py)
    try:
        metrics = _metrics(metrics_port, metrics_addr)
        daemon = Daemon(plane, config, notifier=Notifier.from_env(), metrics=metrics)
        if metrics is not None:
            metrics.watch(lambda: daemon.slots, lambda: daemon.draining)
        code = daemon.run()
    finally:
        plane.close()
    sys.exit(code)


def _metrics(port: int, addr: str) -> DaemonMetrics | None:
    def load() -> DaemonMetrics:
        from .metrics import DaemonMetrics

        return DaemonMetrics()

    started = start_exporter(load, port, addr, script="lakeshore-daemon", extra="daemon")
    if started is None:
        return None
    log.get_logger().info("daemon.metrics_serving", addr=addr, port=started[1])
    return started[0]


class PlaneRefused(click.ClickException):
    """The plane could not be opened: the last line says why, with the config exit status."""

    exit_code = EXIT_CONFIG


def _check_storage(url: str | None) -> None:
    """Refuse a --storage no job could use, before any job claims with it."""
    if url is None:
        return
    try:
        open_storage(url)
    except DispatchError as exc:
        raise click.BadParameter(str(exc), param_hint="'--storage'") from None


def _signing_key(path: str | None) -> bytes | None:
    from dreamlake.lakeshore.home import home

    try:
        return signing.read_key_file(Path(path)) if path else signing.load_key(home())
    except (OSError, DispatchError) as exc:
        raise click.UsageError(f"cannot read the signing key: {exc}") from None


def main() -> None:
    daemon_command.main(prog_name="lakeshore-daemon", auto_envvar_prefix="LAKESHORE_DAEMON")
