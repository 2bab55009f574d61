"""`lakeshore server`: the control plane over HTTP, on the same store as the embedded plane.

The first start on a store with no token creates namespace `default` and an admin token,
written to `$LAKESHORE_HOME/token` (0600) and printed once; later starts print nothing secret.
"""

from __future__ import annotations

from typing import Any

import click

from ..plane.store import SqlStore
from .params import seconds


def store_option(fn: Any) -> Any:
    """`--store` for the commands that act on a store directly (server, tokens, namespaces).

    They run on the control host and open the database the server serves, not a URL, because
    they are how the first tokens come to exist.
    """
    return click.option(
        "--store",
        envvar="LAKESHORE_STORE",
        default=None,
        help="SQLite path or postgresql:// URL (default: $LAKESHORE_HOME/lakeshore.db).",
    )(fn)


def open_cli_store(store: str | None) -> SqlStore:
    from ..home import home
    from ..plane.dispatch import open_store

    return open_store(store or home() / "lakeshore.db")


@click.command("server")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535))
@store_option
@click.option(
    "--max-body-mb",
    envvar="LAKESHORE_MAX_BODY_MB",
    show_envvar=True,
    default=64,
    show_default=True,
    type=click.IntRange(1, 4096),
    help="Largest request body accepted, in MiB (413 above it, before it is read).",
)
@click.option(
    "--body-budget-mb",
    envvar="LAKESHORE_BODY_BUDGET_MB",
    show_envvar=True,
    default=1024,
    show_default=True,
    type=click.IntRange(1, 1024 * 1024),
    help="What all request bodies in flight together may hold in memory, in MiB (429 with "
    "Retry-After beyond it, before the body is read). At least --max-body-mb.",
)
@click.option(
    "--header-timeout-s",
    envvar="LAKESHORE_HEADER_TIMEOUT_S",
    show_envvar=True,
    default=10.0,
    show_default=True,
    type=seconds(0, 3600, low_open=True),
    help="Close a connection whose request headers are not complete this long after it opened "
    "(or after the first byte of its next request).",
)
@click.option(
    "--body-timeout-s",
    envvar="LAKESHORE_BODY_TIMEOUT_S",
    show_envvar=True,
    default=30.0,
    show_default=True,
    type=seconds(0, 3600, low_open=True),
    help="Answer 408 and close when a request body sends no bytes for this long while the "
    "server reads it (a long-poll the server holds is not timed).",
)
@click.option(
    "--skip-integrity-check",
    is_flag=True,
    help="Start without SQLite's quick_check of the database (it reads the whole file: "
    "minutes on a huge one).",
)
@click.option(
    "--log-level",
    default="warning",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
)
@click.option(
    "--retain-frames-s",
    type=seconds(0),
    default=7 * 86400.0,
    show_default=True,
    help="Trim the frames of invocations ended this long ago (0: keep them).",
)
@click.option(
    "--retain-invocations-s",
    type=seconds(0),
    default=30 * 86400.0,
    show_default=True,
    help="Delete invocations ended this long ago, and their spilled payloads (0: keep them).",
)
@click.option(
    "--retention-interval-s",
    type=seconds(0.05),
    default=300.0,
    show_default=True,
    help="How often the retention trim runs.",
)
def server(
    host: str,
    port: int,
    store: str | None,
    max_body_mb: int,
    body_budget_mb: int,
    header_timeout_s: float,
    body_timeout_s: float,
    skip_integrity_check: bool,
    log_level: str,
    retain_frames_s: float,
    retain_invocations_s: float,
    retention_interval_s: float,
) -> None:
    """Run the control plane (Starlette + uvicorn; needs the `server` extra)."""
    if body_budget_mb < max_body_mb:
        raise click.BadParameter(
            f"{body_budget_mb} is below --max-body-mb {max_body_mb}: a body between the two "
            "could never be admitted; raise the budget or lower the limit",
            param_hint="'--body-budget-mb'",
        )
    try:
        import uvicorn

        from ..server.app import create_app
        from ..server.client_timeouts import timed_protocol
    except ModuleNotFoundError as exc:
        raise click.ClickException(
            f"the server needs the 'server' extra ({exc.name} is missing): "
            "pip install 'dreamlake-lakeshore[server]'"
        ) from None
    from ..home import home
    from ..plane.auth import bootstrap
    from ..signing import load_key

    sql = open_cli_store(store)
    problem = sql.integrity_problem(check=not skip_integrity_check)
    if problem is not None:
        sql.close()
        raise click.ClickException(problem)
    try:
        # Payload signatures (sdk/signing.py): the key stays outside the store, in LAKESHORE_HOME.
        sql.signing_key = load_key(home(), create=True)
        made = bootstrap(sql, home())
    except OSError as exc:
        sql.close()
        raise click.ClickException(
            f"cannot write the server's signing key and admin token under {home()} "
            f"({exc.strerror or type(exc).__name__}: {exc.filename}): point LAKESHORE_HOME at a "
            "folder this user can write"
        ) from None
    if made is not None:
        token, path = made
        click.echo(f"admin token (shown once, also in {path}): {token}", err=True)
        if path.name != "token":
            click.echo(
                f"{home() / 'token'} belongs to another store under this LAKESHORE_HOME, so it "
                f"was left as it is: pass --token (or LAKESHORE_TOKEN) to reach this server",
                err=True,
            )
    app = create_app(
        sql,
        max_body=max_body_mb * 1024 * 1024,
        body_budget=body_budget_mb * 1024 * 1024,
        retain_frames_s=retain_frames_s or None,
        retain_invocations_s=retain_invocations_s or None,
        retention_interval_s=retention_interval_s,
    )
    click.echo(f"lakeshore server on http://{host}:{port}", err=True)
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=log_level,
        timeout_graceful_shutdown=3,
        http=timed_protocol(header_timeout_s=header_timeout_s, body_timeout_s=body_timeout_s),
        access_log=log_level in ("info", "debug"),
    )
