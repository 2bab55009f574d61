"""Tokens and namespaces: the few store operations the control plane's auth needs.

A token is a random secret shown once; the store keeps only its sha256 digest, so a leaked
database leaks no usable token, and a lookup by digest is the constant-time comparison (the
secret itself is never compared byte by byte). Each token is scoped to one namespace and also
authorises that namespace's org siblings. The rows are the store's (`SqlStore.create_token`,
`token_scope`, `authorize`, ...: store/auth.py); this module holds the scope, the hashing and the
bootstrap of a fresh server's admin token file.

Within those namespaces a token holds a set of *scopes* (docs/security.md): what it may do
there. They exist because a namespace token used to be code execution on every daemon of the
namespace: anyone holding it could submit a pickle. A token without `submit-code` can only send
values the server can see are plain data, so handing one to a data producer (a web form, a
partner's pipeline) no longer hands out a shell on the GPU fleet.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from dreamlake.lakeshore.errors import InvalidArgument, Unauthorized
from dreamlake.lakeshore.types import DEFAULT_NAMESPACE

#: Every token starts with this, so a secret scanner (and a person) can recognise one.
TOKEN_PREFIX = "lks_"
ADMIN_LABEL = "admin"

#: Read rows, results, frames and topics of the namespace (and the dashboard).
READ: Final = "read"
#: Submit plain values and `raw` envelopes (for a worker's --handler); post plain topic values;
#: cancel and retry. Nothing a worker would unpickle or run as a command.
SUBMIT_DATA: Final = "submit-data"
#: Submit anything: thunks, udf calls, shell commands (`exec`), spilled payloads. Code on the
#: namespace's workers. Includes everything `submit-data` allows.
SUBMIT_CODE: Final = "submit-code"
#: What a daemon does: register and heartbeat, claim, settle, renew leases, post frames, and read
#: the queue and worker rows it polls.
WORK: Final = "work"
#: Queue configuration, worker membership, provider configs, retention trims. Provider configs
#: say how daemons are started (env, args, package), so this is code on the launch hosts too.
MANAGE: Final = "manage"
#: The cross-namespace fleet routes (the controller over HTTP); nothing inside a namespace.
ADMIN: Final = "admin"

#: What a running job's own token holds beside the scopes it inherits from its daemon's
#: (plane/job_token.py): its namespace's plane-tier objects and topic posts. The server mints it
#: with each claim; no stored token holds it, and `tokens create` cannot grant it.
JOB: Final = "job"

#: Every scope a token can be created with, in the order tables show them.
SCOPES: Final = (READ, SUBMIT_DATA, SUBMIT_CODE, WORK, MANAGE, ADMIN)
#: What a token holds unless it is created with explicit scopes: everything a namespace token
#: could do before scopes existed (so no existing token or script changed behaviour).
DEFAULT_SCOPES: Final = frozenset({READ, SUBMIT_DATA, SUBMIT_CODE, WORK, MANAGE})
#: A scope that includes another: whoever may submit code may submit data.
_IMPLIED: Final = {SUBMIT_CODE: frozenset({SUBMIT_DATA})}


def check_scopes(scopes: Iterable[str]) -> frozenset[str]:
    """The set of `scopes`, each a known name; InvalidArgument naming the first unknown one."""
    if isinstance(scopes, str):
        raise InvalidArgument(f"scopes is a list of names, not the string {scopes!r}")
    out = set()
    for name in scopes:
        if name not in SCOPES:
            raise InvalidArgument(f"unknown token scope {name!r}; scopes are {'|'.join(SCOPES)}")
        out.add(name)
    return frozenset(out)


def format_scopes(scopes: Iterable[str]) -> str:
    """Scopes as the store keeps them and messages show them: in `SCOPES` order, one space."""
    held = set(scopes)
    return " ".join(s for s in SCOPES if s in held)


def parse_scopes(text: str | None) -> frozenset[str]:
    """A stored scope string; names this release does not know are ignored (never granted)."""
    return frozenset(s for s in (text or "").split() if s in SCOPES)


@dataclass(frozen=True)
class TokenScope:
    """What a presented token may touch: its namespace and, through it, its org; and what it
    may do there (`scopes`)."""

    namespace: str
    org: str | None
    label: str
    scopes: frozenset[str] = field(default=DEFAULT_SCOPES)
    #: When the token stops opening anything (epoch seconds); None: never.
    expires_at: float | None = None

    def check_live(self, now: float) -> None:
        """Refuse (401) a token past its expiry. The server calls this on every request, its
        grant cache's hits included, so an expired token is refused at once, not a cache
        lifetime later."""
        if self.expires_at is not None and self.expires_at <= now:
            raise Unauthorized(expired_message(self.expires_at))

    @property
    def admin(self) -> bool:
        """May use the cross-namespace fleet routes (the controller over HTTP)."""
        return ADMIN in self.scopes

    def allows(self, scope: str) -> bool:
        """Holds `scope`, directly or through a scope that includes it."""
        return scope in self.scopes or any(
            scope in _IMPLIED.get(held, frozenset()) for held in self.scopes
        )

    def describe(self) -> str:
        """The held scopes for a message: 'read, submit-data', or 'none'."""
        return ", ".join(s for s in (JOB, *SCOPES) if s in self.scopes) or "none"


def expired_message(expires_at: float) -> str:
    """What an expired token is told: when it ended and how to get another."""
    when = dt.datetime.fromtimestamp(expires_at, dt.timezone.utc).isoformat(timespec="seconds")
    return (
        f"this token expired at {when}; ask an admin for a new one "
        "(lakeshore tokens create --namespace NS --expires-in 30d)"
    )


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    import secrets  # at use: every open of a store imports this module, few mint a token

    return TOKEN_PREFIX + secrets.token_urlsafe(32)


class TokenRows(Protocol):
    """The store operations `bootstrap` needs (`SqlStore` has them, from store/auth.py, which
    imports this module: the store depends on auth, not auth on the store)."""

    def ensure_namespace(self, ns: str, org: str | None = None) -> None: ...

    def token_count(self) -> int: ...

    def create_token(
        self,
        ns: str,
        *,
        label: str = "",
        org: str | None = None,
        admin: bool = False,
        scopes: Iterable[str] | None = None,
        expires_in_s: float | None = None,
    ) -> str: ...


def bootstrap(store: TokenRows, home: Path) -> tuple[str, Path] | None:
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
