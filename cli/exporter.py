"""`--metrics-port` of the long-running processes (the daemon, the controller), and the options
they share to be watched: --log-json/--log-console, --metrics-port, --metrics-addr.

Both start their /metrics listener before their first unit of work, so nothing goes uncounted,
and both answer a port in use the same way: a usage error naming the option, not a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import click

from dreamlake.lakeshore.extras import needs_extra


class Exporter(Protocol):
    def serve(self, port: int, addr: str = ...) -> int: ...


E = TypeVar("E", bound=Exporter)


def observability_options(fn: Any) -> Any:
    """--log-json/--log-console, --metrics-port and --metrics-addr on a long-running process."""
    fn = click.option(
        "--metrics-addr",
        default="0.0.0.0",
        show_default=True,
        help="The address --metrics-port listens on.",
    )(fn)
    fn = click.option(
        "--metrics-port",
        type=click.IntRange(0, 65535),
        default=0,
        show_default=True,
        help="Serve Prometheus metrics on this port (0: off). docs/observability.md lists them.",
    )(fn)
    return click.option(
        "--log-json/--log-console",
        default=None,
        help="Log format (default: JSON unless stderr is a terminal).",
    )(fn)


def start_exporter(
    load: Callable[[], E], port: int, addr: str, *, script: str, extra: str
) -> tuple[E, int] | None:
    """`load()` (it imports the metrics module: a missing extra is one line naming it) and
    serve it on `addr:port`; the exporter and the port bound, or None when `port` is 0 (off)."""
    if not port:
        return None
    with needs_extra(f"{script} --metrics-port", extra):
        metrics = load()
    try:
        bound = metrics.serve(port, addr)
    except OSError as exc:
        raise click.BadParameter(
            f"cannot listen on {addr}:{port} ({exc.strerror or exc}): pick a free port",
            param_hint="'--metrics-port'",
        ) from None
    return metrics, bound
