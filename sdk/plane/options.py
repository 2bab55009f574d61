"""`--url / --token / --namespace`: how every command line names its plane.

The `lakeshore` commands and `lakeshore-daemon` take the same three options with the same
environment fallbacks; the plane they name is opened by `plane.default.open_plane`. Kept apart
from the SDK's import path: a producer never pays for click.
"""

from __future__ import annotations

from typing import Any

import click


def plane_options(fn: Any) -> Any:
    """--url / --token / --namespace on a command; they default to LAKESHORE_URL and friends."""
    fn = click.option(
        "--namespace",
        envvar="LAKESHORE_NAMESPACE",
        default=None,
        help="Namespace (default: default).",
    )(fn)
    fn = click.option("--token", envvar="LAKESHORE_TOKEN", default=None, help="Bearer token.")(fn)
    fn = click.option(
        "--url",
        envvar="LAKESHORE_URL",
        default=None,
        help="Control plane URL; without it, the embedded SQLite plane of this box.",
    )(fn)
    return fn
