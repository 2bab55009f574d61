"""One log format for the server, the daemon and the controller: JSON lines, readable on a TTY.

Every line carries a stable `event` name (`job.claimed`, `http.request`, `controller.tick`) so
that alerts and dashboards match on a name rather than on prose, and a job is always the field
`invocation=<id>`, whichever process wrote the line: one `jq 'select(.invocation == ...)'` over
the server's, the daemon's and the controller's logs follows a job end to end.

Logs of libraries (uvicorn's access and error logs, botocore, httpx) go through the same
renderer: a collector then parses one format per box, not one per process and library.

structlog is an extra (server, daemon, controller): nothing on the producer's import path
imports this module, so `import dreamlake.lakeshore` never pays for it.
"""

from __future__ import annotations

import importlib
import logging
import re
import sys
from types import ModuleType
from typing import Any, TextIO


def _import_structlog_without_rich() -> ModuleType:
    """`import structlog`, without the rich traceback renderer its dev module loads at import.

    structlog's package imports `structlog.dev`, which imports rich (and through rich pygments
    and attrs) only to draw exceptions on a console: about 0.1 s of CPU (0.3 s uncompiled) in
    the start of every server, daemon and controller, and the daemons of a fleet start often.
    Our console renderer is given structlog's plain traceback formatter instead, so rich is
    never needed here; a process that imported rich already (the CLI's tables) keeps it.
    """
    if "structlog" in sys.modules or "rich" in sys.modules:
        return importlib.import_module("structlog")
    sys.modules["rich"] = None  # type: ignore[assignment]  # `import rich` raises ImportError
    try:
        return importlib.import_module("structlog")
    finally:
        del sys.modules["rich"]


structlog = _import_structlog_without_rich()

from structlog.typing import EventDict, WrappedLogger  # noqa: E402

#: Accepted by every process's `--log-level`.
LEVELS = ("debug", "info", "warning", "error")
_LEVEL_NUMBERS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
#: Libraries that log every request they send at INFO: kept to warnings unless --log-level debug.
CHATTY_LIBRARIES = ("httpx", "httpcore", "botocore", "boto3", "urllib3")
#: Invocation ids are ULIDs; a request path that names one is logged with it as `invocation`.
_INVOCATION_IN_PATH = re.compile(r"/invocations/([0-9A-HJKMNP-TV-Z]{26})(?:/|$)")


def configure(
    *, json: bool | None = None, level: str = "info", stream: TextIO | None = None
) -> None:
    """Render structlog's events and the standard `logging` module's records alike on `stream`.

    `json=None` picks JSON unless the stream is a TTY. Called once from a process's entry
    point, never at import, so that embedding a component in a test or another program leaves
    that program's logging alone. Our own events go straight to the stream (a third of the cost
    of a trip through `logging`: the daemon writes two lines per job); libraries' records go
    through a root handler that renders them the same way.
    """
    out = stream if stream is not None else sys.stderr
    if json is None:
        json = not (hasattr(out, "isatty") and out.isatty())
    number = _level_number(level)
    renderer: Any = (
        structlog.processors.JSONRenderer(sort_keys=False)
        if json
        else structlog.dev.ConsoleRenderer(
            colors=hasattr(out, "isatty") and out.isatty(),
            exception_formatter=structlog.dev.plain_traceback,
        )
    )
    # The console renderer formats exceptions itself, as Python prints them.
    exc_info = [structlog.processors.format_exc_info] if json else []
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            *exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(number),
        logger_factory=structlog.WriteLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            _from_stdlib,
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
        ],
        pass_foreign_args=True,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *exc_info,
            renderer,
        ],
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(number)
    for chatty in CHATTY_LIBRARIES:  # a line per HTTP request the process makes, at info
        logging.getLogger(chatty).setLevel(number if number <= logging.DEBUG else logging.WARNING)


def _level_number(level: str) -> int:
    try:
        return _LEVEL_NUMBERS[level.lower()]
    except KeyError:
        raise ValueError(
            f"unknown log level {level!r}; use one of {', '.join(_LEVEL_NUMBERS)}"
        ) from None


_BEARER = re.compile(r"(?i)(bearer\s+)\S+")


def _from_stdlib(logger: WrappedLogger, name: str, event: EventDict) -> EventDict:
    """A `logging` record from a library, given an event name and fields where we know it.

    uvicorn's access log becomes `http.request` with client, method, path and status (and the
    invocation its path names); any other library's line keeps its message as `event`.
    """
    record = event.get("_record")
    args = event.pop("positional_args", None)  # the formatter's copy of record.args
    if isinstance(event.get("event"), str) and "earer" in event["event"]:
        # A library's debug lines may quote a request's headers (websockets logs a channel's
        # handshake whole): a bearer token never reaches a log.
        event["event"] = _BEARER.sub(r"\1[redacted]", event["event"])
    if record is None:
        return event
    if record.name == "uvicorn.access" and isinstance(args, tuple) and len(args) == 5:
        client, method, path, _version, status = args
        event.update(event="http.request", client=client, method=method, path=path, status=status)
        found = _INVOCATION_IN_PATH.search(str(path).split("?", 1)[0])
        if found:
            event["invocation"] = found.group(1)
    return event


def get_logger(name: str, **bound: Any) -> Any:
    """A logger named `name` (`lakeshore.daemon`) with `bound` fields on every line."""
    return structlog.get_logger().bind(logger=name, **bound)


class EventLog:
    """`log.bind(k=v).info("event", k2=v2)` for components that also run embedded.

    After `configure()` (a process's entry point) a line goes through structlog like the
    daemon's; embedded in a test or somebody's program, where structlog was never configured
    and would print to stdout, it goes to the standard `logging` logger `name` as
    `event k=v ...`, silent unless that program configures logging.
    """

    def __init__(self, name: str, bound: dict[str, Any] | None = None) -> None:
        self._name = name
        self._bound = bound or {}

    def bind(self, **fields: Any) -> EventLog:
        return EventLog(self._name, {**self._bound, **fields})

    def debug(self, event: str, **fields: Any) -> None:
        self._emit(logging.DEBUG, "debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._emit(logging.INFO, "info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._emit(logging.WARNING, "warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._emit(logging.ERROR, "error", event, fields)

    def exception(self, event: str, **fields: Any) -> None:
        """An error with the exception being handled (as structlog's `exception`)."""
        self._emit(logging.ERROR, "exception", event, fields)

    def _emit(self, level: int, method: str, event: str, fields: dict[str, Any]) -> None:
        if structlog.is_configured():
            getattr(get_logger(self._name, **self._bound), method)(event, **fields)
            return
        logger = logging.getLogger(self._name)
        if logger.isEnabledFor(level):
            pairs = " ".join(f"{k}={v!r}" for k, v in {**self._bound, **fields}.items())
            logger.log(level, "%s %s", event, pairs, exc_info=method == "exception")
