"""Where `lakeshore tokens` and `lakeshore namespaces` act: a URL, or the store itself.

With `--url` (or LAKESHORE_URL) they go over HTTP to the admin routes with `--token` (or
LAKESHORE_TOKEN; on loopback, the box's token file), which must hold the `admin` scope; else
they open the store as before (`--store`, LAKESHORE_STORE, the box's file): that is how a fresh
control plane's first tokens come to exist. A flag on the command line beats the environment,
so `--store` still works in a shell where LAKESHORE_URL is set; the two given at the same level
are refused rather than one silently ignored.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import click
from click.core import ParameterSource

from dreamlake.lakeshore.plane.admin import Admin
from dreamlake.lakeshore.plane.options import IN_PS, token_file_option
from dreamlake.lakeshore.plane.token_file import TOKEN_FILE_ENV

from .server import open_cli_store, store_option

_EXPLICIT = (ParameterSource.COMMANDLINE,)


def admin_options(fn: Any) -> Any:
    """--url / --token / --token-file (over HTTP) and --store (the database directly) on an
    admin verb."""
    fn = store_option(fn)
    fn = click.option(
        "--token",
        envvar="LAKESHORE_TOKEN",
        default=None,
        help=f"Bearer token with the admin scope (with --url). {IN_PS}",
    )(token_file_option(envvar=TOKEN_FILE_ENV)(fn))
    return click.option(
        "--url",
        envvar="LAKESHORE_URL",
        default=None,
        help="Control plane URL: act through its admin routes. Without it, on the store.",
    )(fn)


def _over_http(url: str | None, store: str | None) -> bool:
    if not url:
        return False
    if not store:
        return True
    ctx = click.get_current_context()
    url_cli = ctx.get_parameter_source("url") in _EXPLICIT
    store_cli = ctx.get_parameter_source("store") in _EXPLICIT
    if url_cli == store_cli:
        where = "on the command line" if url_cli else "in the environment"
        raise click.UsageError(
            f"--url and --store are both given {where} (LAKESHORE_URL, LAKESHORE_STORE): "
            "give one, the control plane's URL or its database"
        )
    return url_cli


@contextlib.contextmanager
def admin_target(url: str | None, token: str | None, store: str | None) -> Iterator[Admin]:
    """The admin API the flags name, closed afterwards."""
    target: Admin
    if _over_http(url, store):
        from dreamlake.lakeshore.plane.admin import HttpAdmin

        target = HttpAdmin(url, token=token)
    else:
        target = open_cli_store(store)
    try:
        yield target
    finally:
        target.close()
