"""`lakeshore namespaces`: create namespaces and group them into orgs, on the store directly."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from .server import open_cli_store, store_option


@click.group("namespaces")
def namespaces() -> None:
    """Namespaces and their orgs (a token authorises its namespace's org siblings)."""


@namespaces.command("add")
@click.argument("name")
@click.option("--org", default=None, help="Org to put the namespace in.")
@store_option
def add(name: str, org: str | None, store: str | None) -> None:
    """Create NAME (idempotent); with --org, move it into that org."""

    sql = open_cli_store(store)
    try:
        sql.add_namespace(name, org)
    finally:
        sql.close()
    click.echo(f"namespace {name}" + (f" (org {org})" if org else ""))


@namespaces.command("ls")
@click.option("--json", "as_json", is_flag=True, help="JSON for scripts.")
@store_option
def ls(as_json: bool, store: str | None) -> None:
    """List namespaces and their orgs."""

    sql = open_cli_store(store)
    try:
        rows = sql.list_namespaces()
    finally:
        sql.close()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table("name", "org", "created_at")
    for r in rows:
        table.add_row(str(r["name"]), str(r["org"] or ""), str(r["created_at"]))
    Console().print(table)
