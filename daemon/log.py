"""Structured logs for the daemon: JSON lines for journald and collectors, readable on a terminal.

Every line carries a stable `event` name (`job.claimed`, `job.settle_refused`, ...) so that alerts
and dashboards match on a name rather than on prose, and jobs are bound as `invocation=<id>` so a
single `jq 'select(.invocation == ...)'` follows one job through claim, frames and settle.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

#: Accepted by `--log-level`.
LEVELS = ("debug", "info", "warning", "error")
_LEVEL_NUMBERS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def configure(
    *, json: bool | None = None, level: str = "info", stream: TextIO | None = None
) -> None:
    """Set up structlog for this process; `json=None` picks JSON unless the stream is a TTY.

    Called once from the CLI entry point, never at import, so that embedding the daemon in a
    test or another program leaves that program's logging alone.
    """
    out = stream if stream is not None else sys.stderr
    if json is None:
        json = not (hasattr(out, "isatty") and out.isatty())
    renderer: Any = (
        structlog.processors.JSONRenderer(sort_keys=False)
        if json
        else structlog.dev.ConsoleRenderer(colors=out.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info if json else _passthrough,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVEL_NUMBERS[level.lower()]),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )


def _passthrough(logger: Any, name: str, event: Any) -> Any:
    """The console renderer formats exceptions itself (with rich, when installed)."""
    return event


def get_logger(**bound: Any) -> Any:
    """A logger with `bound` fields on every line (`invocation=...`, `slot=...`)."""
    return structlog.get_logger("lakeshore.daemon").bind(**bound)
