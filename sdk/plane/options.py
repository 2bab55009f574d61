"""`--url / --token / --token-file / --namespace`: how every command line names its plane.

The `lakeshore` commands and `lakeshore-daemon` take the same options with the same environment
fallbacks; the plane they name is opened by `plane.default.open_plane`. Kept apart from the
SDK's import path: a producer never pays for click.

`--token` puts the secret on the command line, where every user of the box reads it (`ps`);
`--token-file` (LAKESHORE_TOKEN_FILE) and LAKESHORE_TOKEN do not. When both a token and a file
are given, the command line beats the environment; both on the command line is refused; both in
the environment: LAKESHORE_TOKEN wins, as the deploy's entrypoint has it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click
from click.core import ParameterSource

from dreamlake.lakeshore.errors import DispatchError

from .base import Plane
from .default import open_plane
from .token_file import TOKEN_FILE_ENV, read_token_file

#: What every --token's help says after what the token is for.
IN_PS = "Visible to every user of this box in ps: prefer --token-file or LAKESHORE_TOKEN."


def plane_options(fn: Any) -> Any:
    """--url / --token / --token-file / --namespace on a command; they default to LAKESHORE_URL
    and friends. The command receives `token` only, read from the file when one is given."""
    fn = click.option(
        "--namespace",
        envvar="LAKESHORE_NAMESPACE",
        default=None,
        help="Namespace (default: default).",
    )(fn)
    fn = token_file_option(envvar=TOKEN_FILE_ENV)(fn)
    fn = click.option(
        "--token", envvar="LAKESHORE_TOKEN", default=None, help=f"Bearer token. {IN_PS}"
    )(fn)
    fn = click.option(
        "--url",
        envvar="LAKESHORE_URL",
        default=None,
        help="Control plane URL; without it, the embedded SQLite plane of this box.",
    )(fn)
    return fn


@contextmanager
def plane_session(url: str | None, token: str | None, namespace: str | None) -> Iterator[Plane]:
    """The plane that `plane_options` name, open for one block and closed when it ends."""
    plane = open_plane(url, token, namespace)
    try:
        yield plane
    finally:
        plane.close()


def token_file_option(
    *, token: str = "token", flag: str = "--token-file", envvar: str | list[str] | None = None
) -> Callable[[Any], Any]:
    """A `flag PATH` option that fills the command's `token` parameter from a file read once,
    here; the command itself never sees the path. Put it below (applied before) the token's own
    option, so that --help lists it after."""
    param = flag.lstrip("-").replace("-", "_")
    shown = "--" + token.replace("_", "-")

    def decorate(fn: Any) -> Any:
        @functools.wraps(fn)
        def command(*args: Any, **kwargs: Any) -> Any:
            path = kwargs.pop(param)
            kwargs[token] = _pick(kwargs.get(token), path, (token, shown), (param, flag))
            return fn(*args, **kwargs)

        return click.option(
            flag,
            param,
            envvar=envvar,
            default=None,
            metavar="PATH",
            help=f"Read {shown} from this file (mode 0600), once, at start.",
        )(command)

    return decorate


def _pick(
    token: str | None, path: str | None, token_names: tuple[str, str], file_names: tuple[str, str]
) -> str | None:
    """The token a command runs with: the value given, or the file's content."""
    if path is None:
        return token
    if token is not None:
        ctx = click.get_current_context()
        typed_token = ctx.get_parameter_source(token_names[0]) is ParameterSource.COMMANDLINE
        typed_file = ctx.get_parameter_source(file_names[0]) is ParameterSource.COMMANDLINE
        if typed_token and typed_file:
            raise click.UsageError(f"give {token_names[1]} or {file_names[1]}, not both")
        if not typed_file:
            return token
    try:
        return read_token_file(path)
    except DispatchError as exc:
        raise click.BadParameter(str(exc), param_hint=f"'{file_names[1]}'") from None
