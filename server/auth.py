"""Bearer-token checks for the namespaced routes.

The header is parsed in the event loop (a missing token is refused without touching the store);
the digest lookup and the namespace check run in one worker thread, since both are blocking
store reads. The ordering of refusals is deliberate: 401 (who are you?) before 404 (unknown
namespace) before 403 (not yours), so an anonymous caller learns nothing about namespaces.

A granted (token, namespace) pair is remembered for `GRANT_TTL_S`, keyed by the token's digest,
with the token's scopes, so a busy client's requests skip that thread hop and read; refusals are
never cached. A token deleted or a namespace moved out of an org therefore takes effect within
that many seconds; a token's expiry is checked on every request, cached or not.

Scopes (docs/security.md) are checked after the namespace, so a token learns which scope it
lacks only for a namespace it may reach: 401, then 404, then 403 for the namespace, then 403
for the scope. The route's scope is checked here, before the body is read; what a submitted
payload carries (a thunk needs `submit-code`) is checked by the route once it has the body.
"""

from __future__ import annotations

import time
from collections import OrderedDict

from starlette.requests import Request

from dreamlake.lakeshore.errors import Forbidden, Unauthorized
from dreamlake.lakeshore.plane.auth import ADMIN, TokenScope, hash_token
from dreamlake.lakeshore.plane.store import SqlStore

from .blocking import run_blocking

GRANT_TTL_S = 5.0
GRANT_CACHE_SIZE = 4096


#: How a scope is named in a refusal, with the way to get a token that holds it.
_HINT = {
    ADMIN: "an admin token (the 'admin' scope: the server's first token, or "
    "`lakeshore tokens create --admin`)",
}


class Grants:
    """Recently granted (token digest, namespace) pairs with the token's scopes and an expiry
    each (a small LRU)."""

    def __init__(self, ttl_s: float = GRANT_TTL_S, size: int = GRANT_CACHE_SIZE) -> None:
        self.ttl_s = ttl_s
        self.size = size
        self._granted: OrderedDict[tuple[str, str | None], tuple[float, TokenScope]] = OrderedDict()

    def allowed(self, key: tuple[str, str | None]) -> TokenScope | None:
        """The scope granted for `key`, or None when there is none (or it expired)."""
        entry = self._granted.get(key)
        if entry is None:
            return None
        if entry[0] < time.monotonic():
            del self._granted[key]
            return None
        self._granted.move_to_end(key)
        return entry[1]

    def grant(self, key: tuple[str, str | None], scope: TokenScope) -> None:
        self._granted[key] = (time.monotonic() + self.ttl_s, scope)
        self._granted.move_to_end(key)
        while len(self._granted) > self.size:
            self._granted.popitem(last=False)


def bearer(request: Request) -> str:
    header = request.headers.get("authorization")
    if not header:
        raise Unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("malformed Authorization header: expected 'Bearer <token>'")
    return token.strip()


def _check(store: SqlStore, token: str, ns: str | None) -> TokenScope:
    scope = store.token_scope(token)
    if ns is not None:
        store.authorize(scope, ns)
    return scope


async def authenticate(
    request: Request, store: SqlStore, ns: str | None, grants: Grants | None = None
) -> TokenScope:
    """The bearer token's scope; refused unless it may act on the namespace in the path (if
    any)."""
    token = bearer(request)
    key = (hash_token(token), ns)
    if grants is not None:
        granted = grants.allowed(key)
        if granted is not None:
            granted.check_live(time.time())  # a cached grant outlives no token's expiry
            return granted
    scope = await run_blocking(_check, store, token, ns)
    if grants is not None:
        grants.grant(key, scope)
    return scope


def require(scope: TokenScope, needed: tuple[str, ...], what: str) -> None:
    """Refuse (403) unless `scope` holds one of `needed`; the message names what `what` needs,
    what the token holds, and how to make one that may."""
    if not needed or any(scope.allows(s) for s in needed):
        return
    names = [s for s in needed if s not in _HINT]
    wanted = " or ".join(
        ([f"a token with the {' or '.join(repr(s) for s in names)} scope"] if names else [])
        + [_HINT[s] for s in needed if s in _HINT]
    )
    raise Forbidden(
        f"{what} needs {wanted}; this token's scopes: {scope.describe()} "
        f"(make one with `lakeshore tokens create --scope {needed[0]} ...`)"
    )
