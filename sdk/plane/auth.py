"""Tokens and namespaces: the few store operations the control plane's auth needs.

A token is a random secret shown once; the store keeps only its sha256 digest, so a leaked
database leaks no usable token, and a lookup by digest is the constant-time comparison (the
secret itself is never compared byte by byte). Each token is scoped to one namespace and also
authorises that namespace's org siblings. The rows are the store's (`SqlStore.create_token`,
`token_scope`, `authorize`, ...: store/auth.py); this module holds the scope, the hashing and the
bootstrap of a fresh server's admin token file.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store import SqlStore

from ..types import DEFAULT_NAMESPACE

#: Every token starts with this, so a secret scanner (and a person) can recognise one.
TOKEN_PREFIX = "lks_"
ADMIN_LABEL = "admin"


@dataclass(frozen=True)
class TokenScope:
    """What a presented token may touch: its namespace and, through it, its org."""

    namespace: str
    org: str | None
    label: str
    #: May use the cross-namespace fleet routes (the controller over HTTP); nothing more.
    admin: bool = False


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def bootstrap(store: SqlStore, home: Path) -> tuple[str, Path] | None:
    """On a store with no token yet: create namespace `default` and an admin token.

    The token is written with mode 0600 to `home/token` (the SDK and CLI read it from there) and
    returned with that path so the caller can print both once; later starts return None. A token
    file is never overwritten (only its hash is stored, so an overwritten token is gone for
    good): when `home/token` already belongs to another store under the same home, the new one
    goes to `home/token.2` (then .3, ...), and the caller says where.
    """
    store.ensure_namespace(DEFAULT_NAMESPACE)
    if store.token_count() > 0:
        return None
    token = store.create_token(DEFAULT_NAMESPACE, label=ADMIN_LABEL, admin=True)
    for n in range(1, 1000):
        path = home / ("token" if n == 1 else f"token.{n}")
        try:
            write_token_file(path, token)
        except FileExistsError:
            continue
        return token, path
    raise FileExistsError(f"{home} holds 999 token files: remove the stale ones")


def write_token_file(path: Path, token: str) -> None:
    """Write a secret so that only the owner can read it, even for an instant; never over an
    existing file (FileExistsError)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, (token + "\n").encode("utf-8"))
    finally:
        os.close(fd)
