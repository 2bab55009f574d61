"""`lakeshore namespaces`: create namespaces and group them into orgs.

With `--url` (or LAKESHORE_URL) and an admin token they go through the control plane's admin
routes; without, they open the store directly (cli/admin_target.py).
"""

from __future__ import annotations

import click

from .admin_target import admin_options, admin_target
from .output import emit_json, json_option, when
from .table import Column, print_table


@click.group("namespaces")
def namespaces() -> None:
    """Namespaces and their orgs (a token authorises its namespace's org siblings)."""


@namespaces.command("add")
@click.argument("name")
@click.option("--org", default=None, help="Org to put the namespace in.")
@json_option
@admin_options
def add(
    name: str, org: str | None, as_json: bool, url: str | None, token: str | None, store: str | None
) -> None:
    """Create NAME (idempotent); with --org, move it into that org.

    With --json: the namespace's row as `namespaces ls --json` lists it, read back after the
    add (so an add without --org shows the org it already had).
    """

    with admin_target(url, token, store) as target:
        target.add_namespace(name, org)
        rows = [r for r in target.list_namespaces() if r["name"] == name] if as_json else []
    if as_json:
        emit_json(rows[0] if rows else {"name": name, "org": org})
        return
    click.echo(f"namespace {name}" + (f" (org {org})" if org else ""))


@namespaces.command("ls")
@json_option
@admin_options
def ls(as_json: bool, url: str | None, token: str | None, store: str | None) -> None:
    """List namespaces and their orgs."""

    with admin_target(url, token, store) as target:
        rows = target.list_namespaces()
    if as_json:
        emit_json(rows)  # created_at as ISO 8601, as every listing
        return
    print_table(
        (Column("name"), Column("org"), Column("created")),
        ((r["name"], r["org"] or "-", when(r["created_at"])) for r in rows),
    )


@namespaces.command("orgs")
@json_option
@admin_options
def orgs(as_json: bool, url: str | None, token: str | None, store: str | None) -> None:
    """List orgs and their namespaces (an org exists while a namespace names it)."""

    with admin_target(url, token, store) as target:
        rows = target.list_orgs()
    if as_json:
        emit_json(rows)
        return
    print_table(  # the namespaces, last, fold onto lines of their own at 80 columns
        (Column("org"), Column("namespaces")),
        ((r["name"], _joined(r["namespaces"])) for r in rows),
    )


def _joined(names: object) -> str:
    return ", ".join(str(n) for n in names) if isinstance(names, list) else ""
