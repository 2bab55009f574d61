"""How every `lakeshore` verb prints: human times in tables, ISO 8601 in `--json`.

A table is read by a person, who wants "4.2m ago", not 1764590000.123; a script reads `--json`,
which wants a timestamp it can parse without knowing our epoch convention, so every `*_at`
field there is ISO 8601 in UTC. Kept in one place so that the verbs cannot drift apart.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from datetime import datetime, timezone
from typing import Any

import click


def json_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`--json`: the same data for scripts, one JSON document on stdout."""
    return click.option("--json", "as_json", is_flag=True, help="JSON output for scripts.")(fn)


def report(as_json: bool, value: Any, line: str) -> None:
    """What a verb that acted says: `value` as one JSON document for scripts, else `line`."""
    if as_json:
        emit_json(value)
    else:
        click.echo(line)


def iso(ts: float | None) -> str | None:
    """An epoch time as ISO 8601 UTC with milliseconds; None stays None (JSON null)."""
    if ts is None:
        return None
    return datetime.fromtimestamp(float(ts), tz=timezone.utc).isoformat(timespec="milliseconds")


def when(ts: object, *, short: bool = False) -> str:
    """An epoch time as a table shows it: local time to the second (`short`: without the year),
    '-' for none. Every listing's times go through here, so no verb prints a raw epoch."""
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not ts:
        return "-"
    return datetime.fromtimestamp(ts).strftime("%m-%d %H:%M:%S" if short else "%Y-%m-%d %H:%M:%S")


def age(seconds: float | None) -> str:
    """A duration as a person reads it at a glance: 850ms, 42s, 4.2m, 3.1h, 2.0d; '-' if none."""
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def plain(value: Any) -> Any:
    """Dataclasses as dicts, recursively, and every `*_at` number as ISO 8601 (see module doc)."""
    if is_dataclass(value) and not isinstance(value, type):
        value = asdict(value)
    if isinstance(value, dict):
        return {k: iso(v) if _is_time(k, v) else plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def _is_time(key: Any, value: Any) -> bool:
    return (
        isinstance(key, str)
        and (key.endswith("_at") or key == "at")
        and isinstance(value, (int, float))
        and not isinstance(value, bool)
    )


def emit_json(value: Any, *, indent: int | None = 2) -> None:
    """One JSON document on stdout (times as ISO 8601, see `plain`)."""
    click.echo(json.dumps(plain(value), indent=indent, sort_keys=True, default=str))


def hidden_alias(group: click.Group, name: str, alias: str) -> None:
    """Register `alias` as a hidden second name of `group`'s command `name` (e.g. `list` for
    `ls`): old scripts keep working, while `--help` shows one verb and completion offers one."""
    command = group.commands[name]
    twin = copy.copy(command)
    twin.hidden = True
    group.add_command(twin, alias)
