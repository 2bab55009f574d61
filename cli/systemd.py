"""`lakeshore systemd`: show and install the units the package ships, on this box.

`install` writes each unit and its EnvironmentFile, never replacing a file that differs from
what it would write unless told to (`--force`: an EnvironmentFile holds an operator's settings
and perhaps a token), and prints the systemctl commands that start the services rather than
running them: enabling a service on a box is the operator's decision.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from dreamlake.lakeshore.daemon import unitfiles
from dreamlake.lakeshore.errors import DispatchError, InvalidArgument
from dreamlake.lakeshore.plane.options import token_file_option
from dreamlake.lakeshore.types import check_name


@click.group("systemd")
def systemd() -> None:
    """systemd units for the daemon, the server and the controller: show, install."""


def _bin_dir(value: str | None) -> str:
    return value or unitfiles.default_bin_dir()


bin_dir_option = click.option(
    "--bin-dir",
    default=None,
    metavar="DIR",
    help="Where ExecStart finds the lakeshore scripts (default: this installation's).",
)
env_dir_option = click.option(
    "--env-dir",
    default=unitfiles.SHIPPED_ENV_DIR,
    show_default=True,
    metavar="DIR",
    help="Where the units read their EnvironmentFiles.",
)


@systemd.command("show")
@click.argument("kind", type=click.Choice(list(unitfiles.UNITS)))
@bin_dir_option
@env_dir_option
def show(kind: str, bin_dir: str | None, env_dir: str) -> None:
    """Print a unit as `install` would write it."""
    try:
        click.echo(unitfiles.render(kind, bin_dir=_bin_dir(bin_dir), env_dir=env_dir), nl=False)
    except DispatchError as exc:
        raise click.UsageError(str(exc)) from None


@systemd.command("install")
@click.option(
    "--daemon",
    "queues",
    multiple=True,
    metavar="QUEUE",
    help="Install the daemon's unit with an EnvironmentFile for QUEUE (repeat for several).",
)
@click.option("--server", is_flag=True, help="Install the control plane's unit.")
@click.option("--controller", is_flag=True, help="Install the elastic controller's unit.")
@click.option(
    "--url",
    default=None,
    help="Control plane URL written to lakeshore.env (not read from LAKESHORE_URL: nothing "
    "from this shell lands in a file unasked).",
)
@click.option(
    "--token",
    default=None,
    help="Token written to lakeshore.env (mode 0600). Visible to every user of this box in ps "
    "while this command runs: prefer --token-file.",
)
@token_file_option()
@click.option("--namespace", default=None, help="Namespace written to lakeshore.env.")
@click.option(
    "--unit-dir",
    default=unitfiles.SYSTEM_UNIT_DIR,
    show_default=True,
    metavar="DIR",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the unit files go.",
)
@env_dir_option
@bin_dir_option
@click.option("--force", is_flag=True, help="Replace files that differ from what is written.")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
def install(
    queues: tuple[str, ...],
    server: bool,
    controller: bool,
    url: str | None,
    token: str | None,
    namespace: str | None,
    unit_dir: Path,
    env_dir: str,
    bin_dir: str | None,
    force: bool,
    as_json: bool,
) -> None:
    """Write units and EnvironmentFiles, then print the systemctl commands that start them."""
    try:
        services: list[tuple[str, str | None]] = [
            ("daemon", check_name(q)) for q in dict.fromkeys(queues)
        ]
    except DispatchError as exc:
        raise click.BadParameter(str(exc), param_hint="'--daemon'") from None
    services += [
        (kind, None) for kind, on in (("server", server), ("controller", controller)) if on
    ]
    if not services:
        raise click.UsageError("name what to install: --daemon QUEUE, --server or --controller")
    try:
        files = _plan(services, url, token, namespace, unit_dir, Path(env_dir), _bin_dir(bin_dir))
    except DispatchError as exc:
        raise click.UsageError(str(exc)) from None
    written, unchanged = _write(files, force)
    commands = _commands(services)
    if as_json:
        report = {"written": written, "unchanged": unchanged, "commands": commands}
        click.echo(json.dumps(report, indent=2))
        return
    for path in written:
        click.echo(f"wrote {path}")
    for path in unchanged:
        click.echo(f"unchanged {path}")
    click.echo("then, as root:")
    for command in commands:
        click.echo(f"  {command}")


def _plan(
    services: list[tuple[str, str | None]],
    url: str | None,
    token: str | None,
    namespace: str | None,
    unit_dir: Path,
    env_dir: Path,
    bin_dir: str,
) -> list[unitfiles.UnitFile]:
    """Every file to write, each once (the daemon's template unit serves every queue)."""
    from dreamlake.lakeshore.plane.http import check_token, check_url, split_urls

    files: dict[Path, unitfiles.UnitFile] = {}
    for kind, queue in services:
        for file in unitfiles.plan(
            kind, queue, unit_dir=unit_dir, env_dir=env_dir, bin_dir=bin_dir
        ):
            files[file.path] = file
    settings = {
        key: value
        for key, value in (
            ("LAKESHORE_URL", url and ",".join(check_url(u) for u in split_urls(url))),
            ("LAKESHORE_TOKEN", token and check_token(token)),
            ("LAKESHORE_NAMESPACE", namespace and check_name(namespace, "namespace")),
        )
        if value
    }
    if settings:
        if not any(unitfiles.reads_shared_env(kind) for kind, _ in services):
            raise InvalidArgument(
                f"--url, --token and --namespace go to {unitfiles.SHARED_ENV}, which only the "
                "daemon and the controller read: install one of them, or drop the options"
            )
        path = env_dir / unitfiles.SHARED_ENV
        files[path] = unitfiles.UnitFile(path, unitfiles.shared_env(settings), unitfiles.ENV_MODE)
    return list(files.values())


def _write(files: list[unitfiles.UnitFile], force: bool) -> tuple[list[str], list[str]]:
    """Write what is new or changed; refuse the lot, before writing any, if a file differs and
    --force was not given (half an install is worse than none)."""
    fresh: list[unitfiles.UnitFile] = []
    same: list[unitfiles.UnitFile] = []
    differ: list[unitfiles.UnitFile] = []
    for file in files:
        try:
            current: str | None = file.path.read_text()
        except FileNotFoundError:
            current = None
        except OSError as exc:
            raise click.ClickException(f"cannot read {file.path}: {exc.strerror}") from None
        if current == file.text:
            same.append(file)
        else:
            (fresh if current is None else differ).append(file)
    if differ and not force:
        names = ", ".join(str(f.path) for f in differ)
        raise click.ClickException(
            f"{names} already exist{'s' if len(differ) == 1 else ''} with other content: "
            "pass --force to replace (lakeshore systemd show prints what would be written)"
        )
    for file in fresh + differ:
        try:
            unitfiles.write(file)
        except OSError as exc:
            raise click.ClickException(
                f"cannot write {file.path}: {exc.strerror} (run as root, or choose "
                "--unit-dir / --env-dir)"
            ) from None
    return [str(f.path) for f in fresh + differ], [str(f.path) for f in same]


def _commands(services: list[tuple[str, str | None]]) -> list[str]:
    """What starts the services: the account first if it is missing, then systemctl."""
    commands = []
    if not unitfiles.user_exists():
        user = unitfiles.SERVICE_USER
        commands.append(
            f"id {user} >/dev/null 2>&1 || useradd --system --home-dir /var/lib/{user} "
            f"--shell /usr/sbin/nologin {user}"
        )
    commands.append("systemctl daemon-reload")
    names = " ".join(unitfiles.service_name(kind, queue) for kind, queue in services)
    commands.append(f"systemctl enable --now {names}")
    return commands
