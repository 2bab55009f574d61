"""`lakeshore server`: the control plane over HTTP, on the same store as the embedded plane.

The first start on a store with no token creates namespace `default` and an admin token,
written to `$LAKESHORE_HOME/token` (0600) and printed once; later starts print nothing secret.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from dreamlake.lakeshore.errors import DispatchError
from dreamlake.lakeshore.plane.store import SqlStore

from .params import seconds

if TYPE_CHECKING:
    import uvicorn


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
    from dreamlake.lakeshore.home import home
    from dreamlake.lakeshore.plane.dispatch import open_store

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
    "--storage",
    default=None,
    help="Where objects uploaded through the control plane (the plane tier) are kept: "
    "file:///dir or s3://bucket/prefix (default: $LAKESHORE_STORAGE, else "
    "$LAKESHORE_HOME/storage).",
)
@click.option(
    "--max-object-mb",
    envvar="LAKESHORE_MAX_OBJECT_MB",
    show_envvar=True,
    default=4096,
    show_default=True,
    type=click.IntRange(1, 1024 * 1024),
    help="Largest object accepted through the plane tier, in MiB (413 above it, before it is "
    "read). Objects stream to storage, so this bounds disk, not memory.",
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
    "--ssl-certfile",
    envvar="LAKESHORE_SSL_CERTFILE",
    show_envvar=True,
    default=None,
    type=click.Path(dir_okay=False),
    help="Serve https with this PEM certificate (chain); its key too unless --ssl-keyfile. "
    "Clients trust it through the system store or LAKESHORE_CA_BUNDLE.",
)
@click.option(
    "--ssl-keyfile",
    envvar="LAKESHORE_SSL_KEYFILE",
    show_envvar=True,
    default=None,
    type=click.Path(dir_okay=False),
    help="The PEM private key of --ssl-certfile (unencrypted).",
)
@click.option(
    "--skip-integrity-check",
    is_flag=True,
    help="Start without SQLite's integrity check of the database (a quick_check of the whole "
    "file up to 256 MiB, of its header and schema beyond).",
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
    storage: str | None,
    max_object_mb: int,
    header_timeout_s: float,
    body_timeout_s: float,
    ssl_certfile: str | None,
    ssl_keyfile: str | None,
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
    check_tls(ssl_certfile, ssl_keyfile)  # before the store is opened or a token printed
    try:
        import uvicorn

        from dreamlake.lakeshore.server.app import configure_logging, create_app
        from dreamlake.lakeshore.server.client_timeouts import timed_protocol
        from dreamlake.lakeshore.server.memory import return_big_blocks
    except ModuleNotFoundError as exc:
        raise click.ClickException(
            f"the server needs the 'server' extra ({exc.name} is missing): "
            "pip install 'dreamlake-lakeshore[server]'"
        ) from None
    from dreamlake.lakeshore.home import home
    from dreamlake.lakeshore.plane.auth import bootstrap
    from dreamlake.lakeshore.signing import load_key
    from dreamlake.lakeshore.storage import storage as open_storage

    try:
        objects = open_storage(storage)  # a bad URL is refused here, not at a first upload
    except DispatchError as exc:
        raise click.BadParameter(str(exc), param_hint="'--storage'") from None

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
        storage=objects,
        max_object=max_object_mb * 1024 * 1024,
    )
    scheme = "https" if ssl_certfile else "http"
    issued = _home_token_of(sql, made)
    click.echo(f"lakeshore server on {scheme}://{host}:{port}", err=True)
    configure_logging(log_level)  # uvicorn's logs too, in the daemon's format (sdk/logs.py)
    return_big_blocks()  # freed request bodies go back to the OS (server/memory.py)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        log_config=None,
        timeout_graceful_shutdown=3,
        http=timed_protocol(header_timeout_s=header_timeout_s, body_timeout_s=body_timeout_s),
        access_log=log_level in ("info", "debug"),
        ssl_certfile=ssl_certfile,
        ssl_keyfile=ssl_keyfile,
    )
    serve(config, scheme, issued)


def _home_token_of(sql: SqlStore, made: tuple[str, Path] | None) -> str | None:
    """The token in `$LAKESHORE_HOME/token` when this server's store issued it (it wrote it
    now, or the store knows it), else None: a server records where it listens only beside its
    own token, never beside the token of another store under the same home."""
    from dreamlake.lakeshore.home import home
    from dreamlake.lakeshore.plane.home_token import TOKEN_FILE

    if made is not None and made[1].name == TOKEN_FILE:
        return made[0]
    try:
        token = (home() / TOKEN_FILE).read_text().strip()
        sql.token_scope(token)
    except (OSError, UnicodeDecodeError, DispatchError):
        return None
    return token


def serve(config: uvicorn.Config, scheme: str, issued: str | None) -> None:
    """Run uvicorn as `uvicorn.run` would, and while it listens, record where beside the home
    token it issued (plane/home_token.py): clients send that token to these sockets only."""
    import uvicorn

    from dreamlake.lakeshore.home import home
    from dreamlake.lakeshore.plane.home_token import forget_listener

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and issued is not None:
                bound = [s.getsockname() for server in self.servers for s in server.sockets]
                _record(issued, scheme, [(str(a[0]), int(a[1])) for a in bound])

        async def shutdown(self, sockets: Any = None) -> None:
            forget_listener(home())  # before the last requests drain: the port is not ours
            await super().shutdown(sockets=sockets)

    server = Server(config)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        forget_listener(home())
    if not server.started:
        sys.exit(3)  # uvicorn's exit status for a server that never started


def _record(issued: str, scheme: str, bound: list[tuple[str, int]]) -> None:
    from dreamlake.lakeshore.home import home
    from dreamlake.lakeshore.plane.home_token import record_listener

    try:
        record_listener(home(), issued, scheme, bound)
    except OSError as exc:
        click.echo(
            f"cannot record where this server listens beside the admin token ({exc}): clients "
            "on this box need --token to reach it",
            err=True,
        )


def check_tls(certfile: str | None, keyfile: str | None) -> None:
    """Load the certificate and key as uvicorn will, so a wrong path or a key that does not
    match is one line naming the option, not a traceback from inside uvicorn's startup."""
    if certfile is None:
        if keyfile is not None:
            raise click.BadParameter(
                "a key without a certificate: give --ssl-certfile too", param_hint="'--ssl-keyfile'"
            )
        return
    import ssl

    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
            certfile,
            keyfile,
            password="",  # an encrypted key fails here, never prompts
        )
    except (OSError, ssl.SSLError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        files = f"{certfile!r}" + (f" and --ssl-keyfile {keyfile!r}" if keyfile else "")
        raise click.BadParameter(
            f"cannot load the TLS certificate {files} ({why}): give a PEM certificate and "
            "its unencrypted PEM key",
            param_hint="'--ssl-certfile'",
        ) from None
