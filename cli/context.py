"""How a CLI command finds its plane: flags, then the environment, then the embedded default."""

from __future__ import annotations

from typing import Any

import click

from ..plane.base import Plane


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


def open_plane(url: str | None, token: str | None, namespace: str | None) -> Plane:
    from ..plane.default import open_plane

    return open_plane(url, token, namespace)
