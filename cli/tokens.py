"""`lakeshore tokens`: mint and list bearer tokens, on the store directly (control host only).

Each token holds scopes (docs/security.md): `--scope` picks them, repeatable; without it a token
gets every namespace scope, what a token could always do. A token meant for a producer that sends
data (not code) is `--scope submit-data --scope read`.
"""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from ..plane.auth import DEFAULT_SCOPES, SCOPES, format_scopes
from .server import open_cli_store, store_option


@click.group("tokens")
def tokens() -> None:
    """Bearer tokens for the control plane (stored hashed; shown once)."""


@tokens.command("create")
@click.option("--namespace", "-n", required=True, help="Namespace the token is scoped to.")
@click.option("--org", default=None, help="Put the namespace in this org (siblings share tokens).")
@click.option("--label", default="", help="A note to tell tokens apart.")
@click.option(
    "--scope",
    "scopes",
    multiple=True,
    type=click.Choice(SCOPES),
    help="What the token may do; repeat for several. Default: every scope but admin "
    f"({format_scopes(DEFAULT_SCOPES)}). submit-code lets it run code on the namespace's "
    "workers; see docs/security.md.",
)
@click.option(
    "--admin",
    is_flag=True,
    help="Also open the fleet routes (every namespace's fleet): for lakeshore-controller --url. "
    "Adds admin to the other scopes (the default set without --scope); --scope admin alone "
    "opens the fleet routes and nothing else.",
)
@store_option
def create(
    namespace: str,
    org: str | None,
    label: str,
    scopes: tuple[str, ...],
    admin: bool,
    store: str | None,
) -> None:
    """Create a token for NAMESPACE (created if missing) and print it once."""

    sql = open_cli_store(store)
    try:
        token = sql.create_token(
            namespace, label=label, org=org, admin=admin, scopes=scopes or None
        )
    finally:
        sql.close()
    click.echo(token)


@tokens.command("ls")
@click.option("--json", "as_json", is_flag=True, help="JSON for scripts.")
@store_option
def ls(as_json: bool, store: str | None) -> None:
    """List tokens (digest prefix, namespace, label, scopes); the secrets are not stored."""

    sql = open_cli_store(store)
    try:
        rows = sql.list_tokens()
    finally:
        sql.close()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table("digest", "namespace", "label", "scopes", "created_at")
    for r in rows:
        scopes = r["scopes"]
        shown = format_scopes(scopes if isinstance(scopes, list) else ()) or "none"
        table.add_row(
            str(r["hash"]), str(r["namespace"]), str(r["label"]), shown, str(r["created_at"])
        )
    Console().print(table)


@tokens.command("revoke")
@click.argument("digest")
@store_option
def revoke(digest: str, store: str | None) -> None:
    """Revoke the token whose digest starts with DIGEST (the prefix `tokens ls` shows).

    A running server stops accepting it within a few seconds (its grant cache's lifetime).
    """
    from ..errors import DispatchError

    sql = open_cli_store(store)
    try:
        row = sql.revoke_token(digest)
    except DispatchError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        sql.close()
    click.echo(f"revoked {row['hash']} ({row['namespace']}, {row['label'] or 'no label'})")
