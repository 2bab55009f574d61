"""`lakeshore tokens`: mint, list and revoke bearer tokens.

With `--url` (or LAKESHORE_URL) and an admin token they go through the control plane's admin
routes, from anywhere; without, they open the store directly (the control host), which is how
the first tokens come to exist (cli/admin_target.py). `--expires-in 30d` gives a token an end.

Each token holds scopes (docs/security.md): `--scope` picks them, repeatable; without it a token
gets every namespace scope, what a token could always do. A token meant for a producer that sends
data (not code) is `--scope submit-data --scope read`.
"""

from __future__ import annotations

import datetime as dt

import click

from dreamlake.lakeshore.errors import DispatchError
from dreamlake.lakeshore.plane.auth import DEFAULT_SCOPES, SCOPES, format_scopes, hash_token
from dreamlake.lakeshore.prune import parse_duration

from .admin_target import admin_options, admin_target
from .output import emit_json, json_option
from .table import Column, print_table, wide_option


def lifetime(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """--expires-in: plain seconds (3600) or a number with a unit s, m, h, d or w (90m, 30d)."""
    if value is None:
        return None
    try:
        seconds = parse_duration(value)
    except DispatchError as exc:
        raise click.BadParameter(str(exc)) from None
    if seconds <= 0:
        raise click.BadParameter(f"{value!r} is not a lifetime: give more than 0 (30d, 12h, 90m)")
    return seconds


def _when(epoch: object) -> str:
    """An epoch time as a table shows it (UTC, to the second); '' for none."""
    if not isinstance(epoch, (int, float)):
        return ""
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


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
@click.option(
    "--expires-in",
    callback=lifetime,
    metavar="DURATION",
    default=None,
    help="Lifetime: seconds or 90m, 12h, 30d, 2w. Afterwards the token gets 401 saying it "
    "expired. Default: never.",
)
@json_option
@admin_options
def create(
    namespace: str,
    org: str | None,
    label: str,
    scopes: tuple[str, ...],
    admin: bool,
    expires_in: float | None,
    as_json: bool,
    url: str | None,
    token: str | None,
    store: str | None,
) -> None:
    """Create a token for NAMESPACE (created if missing) and print it once.

    With --json: the secret beside its row as `tokens ls --json` lists it (digest, scopes,
    created_at, expires_at), read back after the create, so a script keeps both in one step.
    """

    with admin_target(url, token, store) as target:
        secret = target.create_token(
            namespace,
            label=label,
            org=org,
            admin=admin,
            scopes=scopes or None,
            expires_in_s=expires_in,
        )
        if not as_json:
            click.echo(secret)
            return
        digest = hash_token(secret)[:12]
        rows = [r for r in target.list_tokens() if r["hash"] == digest]
    # The row is missing only when another admin revoked it in between: say what is known.
    row = rows[0] if rows else {"hash": digest, "namespace": namespace, "label": label}
    emit_json({"token": secret, **row})


#: `tokens ls`: the scopes, last, fold onto lines of their own; the dates are `--wide` only.
LS_COLUMNS = (
    Column("digest"),
    Column("namespace"),
    Column("label"),
    Column("created", wide=True),
    Column("expires", wide=True),
    Column("scopes"),
)


@tokens.command("ls")
@wide_option
@json_option
@admin_options
def ls(wide: bool, as_json: bool, url: str | None, token: str | None, store: str | None) -> None:
    """List tokens (digest prefix, namespace, label, scopes, expiry); the secrets are not stored."""

    with admin_target(url, token, store) as target:
        rows = target.list_tokens()
    if as_json:
        emit_json(rows)  # created_at / expires_at as ISO 8601, as every listing
        return
    rows_shown = []
    for r in rows:
        scopes = r["scopes"]
        rows_shown.append(
            (
                str(r["hash"]),
                str(r["namespace"]),
                str(r["label"]),
                _when(r["created_at"]),
                _when(r.get("expires_at")) or "never",
                format_scopes(scopes if isinstance(scopes, list) else ()) or "none",
            )
        )
    print_table(LS_COLUMNS, rows_shown, wide=wide)


@tokens.command("revoke")
@click.argument("digest")
@json_option
@admin_options
def revoke(
    digest: str, as_json: bool, url: str | None, token: str | None, store: str | None
) -> None:
    """Revoke the token whose digest starts with DIGEST (the prefix `tokens ls` shows).

    A running server stops accepting it within a few seconds (its grant cache's lifetime).
    """
    with admin_target(url, token, store) as target:
        try:
            row = target.revoke_token(digest)
        except DispatchError as exc:
            raise click.ClickException(str(exc)) from None
    if as_json:
        emit_json({**row, "revoked": True})
        return
    click.echo(f"revoked {row['hash']} ({row['namespace']}, {row['label'] or 'no label'})")
