"""`--metrics-port` of the long-running processes (the daemon, the controller).

Both start their /metrics listener before their first unit of work, so nothing goes uncounted,
and both answer a port in use the same way: a usage error naming the option, not a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

import click

from dreamlake.lakeshore.extras import needs_extra


class Exporter(Protocol):
    def serve(self, port: int, addr: str = ...) -> int: ...


E = TypeVar("E", bound=Exporter)


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
