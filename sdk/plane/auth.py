"""Tokens and namespaces: the few store operations the control plane's auth needs.

A token is a random secret shown once; the store keeps only its sha256 digest, so a leaked
database leaks no usable token, and a lookup by digest is the constant-time comparison (the
secret itself is never compared byte by byte). Each token is scoped to one namespace and also
authorises that namespace's org siblings. These are plain functions over a `SqlStore` so the
server and the `lakeshore tokens` / `lakeshore namespaces` commands share them without widening
the store class.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import Forbidden, InvalidArgument, NotFound, Unauthorized
from ..types import DEFAULT_NAMESPACE, check_name
from .store import SqlStore

#: Every token starts with this, so a secret scanner (and a person) can recognise one.
TOKEN_PREFIX = "lks_"
ADMIN_LABEL = "admin"


@dataclass(frozen=True)
class TokenScope:
    """What a presented token may touch: its namespace and, through it, its org."""

    namespace: str
    org: str | None
    label: str


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def add_namespace(store: SqlStore, ns: str, org: str | None = None) -> None:
    """Create `ns` (idempotent); with `org`, (re)assign it to that org."""
    if org is not None:
        check_name(org, "org")
    store.ensure_namespace(ns, org)
    if org is not None:
        with store.connector.transaction() as tx:
            tx.all("auth_set_namespace_org", ns=ns, org=org)


def list_namespaces(store: SqlStore) -> list[dict[str, object]]:
    with store.connector.transaction(write=False) as tx:
        return tx.all("auth_list_namespaces")


def create_token(store: SqlStore, ns: str, *, label: str = "", org: str | None = None) -> str:
    """A new token for `ns` (created if missing); the secret is returned once, never stored."""
    if not isinstance(label, str) or len(label) > 200:
        raise InvalidArgument("label must be a string of at most 200 characters")
    add_namespace(store, ns, org)
    token = new_token()
    with store.connector.transaction() as tx:
        tx.all("auth_insert_token", hash=hash_token(token), ns=ns, label=label, now=time.time())
    return token


def list_tokens(store: SqlStore) -> list[dict[str, object]]:
    """Token rows with a short digest prefix to tell them apart; the secrets are not known."""
    with store.connector.transaction(write=False) as tx:
        rows = tx.all("auth_list_tokens")
    return [{**r, "hash": str(r["hash"])[:12]} for r in rows]


def revoke_token(store: SqlStore, digest_prefix: str) -> dict[str, object]:
    """Delete the one token whose digest starts with `digest_prefix` (as `tokens ls` shows it).

    The server's grant cache forgets it within `server.auth.GRANT_TTL_S`.
    """
    prefix = digest_prefix.strip().lower()
    if len(prefix) < 8 or any(c not in "0123456789abcdef" for c in prefix):
        raise InvalidArgument("give at least 8 hex digits of the token's digest (tokens ls)")
    with store.connector.transaction() as tx:
        hashes = [str(r["hash"]) for r in tx.all("auth_list_tokens")]
        matches = [h for h in hashes if h.startswith(prefix)]
        if not matches:
            raise NotFound(f"no token's digest starts with '{prefix}'")
        if len(matches) > 1:
            raise InvalidArgument(f"'{prefix}' matches {len(matches)} tokens: give more digits")
        (row,) = tx.all("auth_delete_tokens", hashes=matches)
    return {**row, "hash": str(row["hash"])[:12]}


def token_count(store: SqlStore) -> int:
    with store.connector.transaction(write=False) as tx:
        row = tx.one("auth_count_tokens")
    return int(row["n"]) if row else 0


def lookup(store: SqlStore, token: str | None) -> TokenScope:
    """The scope of a presented token; Unauthorized when missing or unknown."""
    if not token:
        raise Unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
    with store.connector.transaction(write=False) as tx:
        row = tx.one("auth_get_token", hash=hash_token(token))
    if row is None:
        raise Unauthorized("unknown token")
    return TokenScope(namespace=row["namespace"], org=row["org"], label=row["label"])


def authorize(store: SqlStore, scope: TokenScope, ns: str) -> None:
    """Allow `ns` for `scope`: its own namespace or an org sibling. Unknown `ns`: NotFound."""
    row = store.namespace(ns)
    if row is None:
        raise NotFound(f"unknown namespace '{ns}'")
    if ns == scope.namespace:
        return
    if scope.org is not None and row["org"] == scope.org:
        return
    raise Forbidden(f"this token is scoped to namespace '{scope.namespace}', not '{ns}'")


def bootstrap(store: SqlStore, home: Path) -> str | None:
    """On a store with no token yet: create namespace `default` and an admin token.

    The token is written to `home/token` with mode 0600 (the SDK and CLI read it from there)
    and returned so the caller can print it once; later starts return None.
    """
    store.ensure_namespace(DEFAULT_NAMESPACE)
    if token_count(store) > 0:
        return None
    token = create_token(store, DEFAULT_NAMESPACE, label=ADMIN_LABEL)
    write_token_file(home / "token", token)
    return token


def write_token_file(path: Path, token: str) -> None:
    """Write a secret so that only the owner can read it, even for an instant."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, (token + "\n").encode("utf-8"))
    finally:
        os.close(fd)
