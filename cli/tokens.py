"""`lakeshore tokens`: mint and list bearer tokens, on the store directly (control host only)."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from .server import open_cli_store, store_option


@click.group("tokens")
def tokens() -> None:
    """Bearer tokens for the control plane (stored hashed; shown once)."""


@tokens.command("create")
@click.option("--namespace", "-n", required=True, help="Namespace the token is scoped to.")
@click.option("--org", default=None, help="Put the namespace in this org (siblings share tokens).")
@click.option("--label", default="", help="A note to tell tokens apart.")
@click.option(
    "--admin",
    is_flag=True,
    help="Also open the fleet routes (every namespace's fleet): for lakeshore-controller --url.",
)
@store_option
def create(namespace: str, org: str | None, label: str, admin: bool, store: str | None) -> None:
    """Create a token for NAMESPACE (created if missing) and print it once."""

    sql = open_cli_store(store)
    try:
        click.echo(sql.create_token(namespace, label=label, org=org, admin=admin))
    finally:
        sql.close()


@tokens.command("ls")
@click.option("--json", "as_json", is_flag=True, help="JSON for scripts.")
@store_option
def ls(as_json: bool, store: str | None) -> None:
    """List tokens (digest prefix, namespace, label); the secrets themselves are not stored."""

    sql = open_cli_store(store)
    try:
        rows = sql.list_tokens()
    finally:
        sql.close()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table("digest", "namespace", "label", "admin", "created_at")
    for r in rows:
        table.add_row(
            str(r["hash"]),
            str(r["namespace"]),
            str(r["label"]),
            "yes" if r["admin"] else "",
            str(r["created_at"]),
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
