"""Tokens and namespaces' orgs: who may touch which namespace (the scope and hashing are in
../auth.py). Tokens are stored as their sha256 digest only.

A token row keeps its namespace scopes (`read`, `submit-data`, ...) as one space-separated
string, and `admin` in its own column (as before scopes existed), so rows written by an earlier
release keep exactly what they could do.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from dreamlake.lakeshore.errors import Forbidden, InvalidArgument, NotFound, Unauthorized
from dreamlake.lakeshore.plane import job_token
from dreamlake.lakeshore.plane.auth import (
    ADMIN,
    DEFAULT_SCOPES,
    TokenScope,
    check_scopes,
    format_scopes,
    hash_token,
    new_token,
    parse_scopes,
)
from dreamlake.lakeshore.types import check_name

from .namespaces import NamespaceStore


class AuthStore(NamespaceStore):
    def add_namespace(self, ns: str, org: str | None = None) -> None:
        """Create `ns` (idempotent); with `org`, (re)assign it to that org."""
        if org is not None:
            check_name(org, "org")
        self.ensure_namespace(ns, org)
        if org is not None:
            with self.connector.transaction() as tx:
                tx.all("auth_set_namespace_org", ns=ns, org=org)

    def list_namespaces(self) -> list[dict[str, object]]:
        with self.connector.transaction(write=False) as tx:
            return tx.all("auth_list_namespaces")

    def create_token(
        self,
        ns: str,
        *,
        label: str = "",
        org: str | None = None,
        admin: bool = False,
        scopes: Iterable[str] | None = None,
        expires_in_s: float | None = None,
    ) -> str:
        """A new token for `ns` (created if missing); the secret is returned once, never stored.

        `scopes` (docs/security.md) say what it may do in its namespace and org; None gives
        every namespace scope, what a token could do before scopes existed. `admin` (or the
        scope `admin`) also opens the fleet routes (every namespace's queues, workers and
        providers, read by the controller over HTTP); it grants nothing in other namespaces'
        routes. With `expires_in_s` it is refused (401, saying when it expired) from that many
        seconds on; without, it never expires.
        """
        if not isinstance(label, str) or len(label) > 200:
            raise InvalidArgument("label must be a string of at most 200 characters")
        held = DEFAULT_SCOPES if scopes is None else check_scopes(scopes)
        admin = bool(admin) or ADMIN in held
        lifetime = check_lifetime(expires_in_s)
        self.add_namespace(ns, org)
        token = new_token()
        now = time.time()
        with self.connector.transaction() as tx:
            tx.all(
                "auth_insert_token",
                hash=hash_token(token),
                ns=ns,
                label=label,
                now=now,
                admin=int(admin),
                scopes=format_scopes(held - {ADMIN}),
                expires_at=None if lifetime is None else now + lifetime,
            )
        return token

    def list_orgs(self) -> list[dict[str, object]]:
        """Each org with its namespaces, by name. An org is the namespaces that name it (it has
        no row of its own): it exists while one of them does."""
        orgs: dict[str, list[str]] = {}
        for row in self.list_namespaces():
            if row["org"] is not None:
                orgs.setdefault(str(row["org"]), []).append(str(row["name"]))
        return [{"name": name, "namespaces": orgs[name]} for name in sorted(orgs)]

    def list_tokens(self) -> list[dict[str, object]]:
        """Token rows with a short digest prefix to tell them apart; the secrets are not known."""
        with self.connector.transaction(write=False) as tx:
            rows = tx.all("auth_list_tokens")
        return [
            {
                **r,
                "hash": str(r["hash"])[:12],
                "admin": bool(r["admin"]),
                "scopes": format_scopes(_held(r)).split(),
            }
            for r in rows
        ]

    def describe_token(self, token: str) -> dict[str, object]:
        """A token's row as `list_tokens` shows it (expired or not), for the answer to the one
        who just made it; NotFound for a secret that names no token."""
        with self.connector.transaction(write=False) as tx:
            row = tx.one("auth_get_token", hash=hash_token(token))
        if row is None:
            raise NotFound("no such token")
        return {
            "hash": str(row["hash"])[:12],
            "namespace": row["namespace"],
            "org": row["org"],
            "label": row["label"],
            "admin": bool(row["admin"]),
            "scopes": format_scopes(_held(row)).split(),
            "expires_at": row["expires_at"],
        }

    def revoke_token(self, digest_prefix: str) -> dict[str, object]:
        """Delete the one token whose digest starts with `digest_prefix` (as `tokens ls` shows).

        The server's grant cache forgets it within `server.auth.GRANT_TTL_S`.
        """
        prefix = digest_prefix.strip().lower()
        if len(prefix) < 8 or any(c not in "0123456789abcdef" for c in prefix):
            raise InvalidArgument("give at least 8 hex digits of the token's digest (tokens ls)")
        with self.connector.transaction() as tx:
            hashes = [str(r["hash"]) for r in tx.all("auth_list_tokens")]
            matches = [h for h in hashes if h.startswith(prefix)]
            if not matches:
                raise NotFound(f"no token's digest starts with '{prefix}'")
            if len(matches) > 1:
                raise InvalidArgument(f"'{prefix}' matches {len(matches)} tokens: give more digits")
            (row,) = tx.all("auth_delete_tokens", hashes=matches)
        return {**row, "hash": str(row["hash"])[:12]}

    def token_count(self) -> int:
        with self.connector.transaction(write=False) as tx:
            row = tx.one("auth_count_tokens")
        return int(row["n"]) if row else 0

    def token_scope(self, token: str | None) -> TokenScope:
        """The scope of a presented token; Unauthorized when missing or unknown."""
        if not token:
            raise Unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
        if token.startswith(job_token.PREFIX):
            return self._job_token_scope(token)
        with self.connector.transaction(write=False) as tx:
            row = tx.one("auth_get_token", hash=hash_token(token))
        if row is None:
            raise Unauthorized("unknown token")
        scope = TokenScope(
            namespace=row["namespace"],
            org=row["org"],
            label=row["label"],
            scopes=_held(row),
            expires_at=row["expires_at"],
        )
        scope.check_live(time.time())
        return scope

    def _job_token_scope(self, token: str) -> TokenScope:
        """A running job's own token (plane/job_token.py): its namespace, while its attempt
        runs. Forged, of another server, or of an attempt that ended: one refusal for all, so
        a guess learns nothing about the job it names."""
        parsed = job_token.parse(token)
        key = self.signing_key
        row = None
        if parsed is not None and key is not None:
            with self.connector.transaction(write=False) as tx:
                row = tx.one("auth_job_of", id=parsed.inv_id)
        if (
            parsed is None
            or key is None
            or row is None
            or row["state"] != "running"
            or not parsed.matches(key, row["namespace"], row["lease"] or "")
        ):
            raise Unauthorized(
                "unknown job token, or its job's attempt has ended: a job's token opens "
                "nothing once the attempt it was made for is over"
            )
        return parsed.scope(row["namespace"])

    def authorize(self, scope: TokenScope, ns: str) -> None:
        """Allow `ns` for `scope`: its own namespace or an org sibling. Unknown `ns`: NotFound."""
        row = self.namespace(ns)
        if row is None:
            raise NotFound(f"unknown namespace '{ns}'")
        if ns == scope.namespace:
            return
        if scope.org is not None and row["org"] == scope.org:
            return
        raise Forbidden(f"this token is scoped to namespace '{scope.namespace}', not '{ns}'")


def _held(row: dict[str, object]) -> frozenset[str]:
    """A token row's scopes: its namespace scopes, plus `admin` from the admin column."""
    scopes = parse_scopes(str(row["scopes"]) if row.get("scopes") is not None else None)
    return scopes | {ADMIN} if row["admin"] else scopes


#: The longest lifetime a token may be given: a typo of units (30000d) is refused, not obeyed.
MAX_LIFETIME_S = 100 * 365 * 86400.0


def check_lifetime(expires_in_s: object) -> float | None:
    """A token lifetime in seconds (None: it never expires), or InvalidArgument saying the range."""
    if expires_in_s is None:
        return None
    if (
        isinstance(expires_in_s, bool)
        or not isinstance(expires_in_s, (int, float))
        or not 0 < expires_in_s <= MAX_LIFETIME_S
    ):
        raise InvalidArgument(
            f"expires_in_s must be a number of seconds in (0, {MAX_LIFETIME_S:.0f}] (100 years), "
            f"got {expires_in_s!r}"
        )
    return float(expires_in_s)
