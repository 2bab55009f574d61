"""The worker core's log: structlog's calling convention over the standard `logging` module.

The core logs `log.info("job.claimed", invocation=...)`. The daemon hands it a structlog logger
(JSON lines for journald); `run_worker` runs in somebody else's program, whose logging is theirs,
so it gets this adapter: the same event names and fields on the `dreamlake.lakeshore.worker`
logger, silent unless that program configures logging.
"""

from __future__ import annotations

import logging
from typing import Any

_LOGGER = logging.getLogger("dreamlake.lakeshore.worker")


class EventLogger:
    """`log.bind(k=v).warning("event", k2=v2)` -> `event k=v k2=v2` at WARNING."""

    def __init__(self, bound: dict[str, Any] | None = None) -> None:
        self._bound = bound or {}

    def bind(self, **fields: Any) -> EventLogger:
        return EventLogger({**self._bound, **fields})

    def _log(self, level: int, event: str, fields: dict[str, Any], exc_info: bool = False) -> None:
        if _LOGGER.isEnabledFor(level):
            pairs = " ".join(f"{k}={v!r}" for k, v in {**self._bound, **fields}.items())
            _LOGGER.log(level, "%s %s", event, pairs, exc_info=exc_info)

    def debug(self, event: str, **fields: Any) -> None:
        self._log(logging.DEBUG, event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._log(logging.INFO, event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._log(logging.WARNING, event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._log(logging.ERROR, event, fields)

    def exception(self, event: str, **fields: Any) -> None:
        """An error with the exception being handled (as structlog's `exception`)."""
        self._log(logging.ERROR, event, fields, exc_info=True)
