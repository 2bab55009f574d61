"""Bearer-token checks for the namespaced routes.

The header is parsed in the event loop (a missing token is refused without touching the store);
the digest lookup and the namespace check run in one worker thread, since both are blocking
store reads. The ordering of refusals is deliberate: 401 (who are you?) before 404 (unknown
namespace) before 403 (not yours), so an anonymous caller learns nothing about namespaces.

A granted (token, namespace) pair is remembered for `GRANT_TTL_S`, keyed by the token's digest,
so a busy client's requests skip that thread hop and read; refusals are never cached. A token
deleted or a namespace moved out of an org therefore takes effect within that many seconds.
"""

from __future__ import annotations

import time
from collections import OrderedDict

from starlette.requests import Request

from ..errors import Unauthorized
from ..plane.auth import hash_token
from ..plane.store import SqlStore
from .blocking import run_blocking

GRANT_TTL_S = 5.0
GRANT_CACHE_SIZE = 4096


class Grants:
    """Recently granted (token digest, namespace) pairs, with an expiry each (a small LRU)."""

    def __init__(self, ttl_s: float = GRANT_TTL_S, size: int = GRANT_CACHE_SIZE) -> None:
        self.ttl_s = ttl_s
        self.size = size
        self._expiry: OrderedDict[tuple[str, str | None], float] = OrderedDict()

    def allowed(self, key: tuple[str, str | None]) -> bool:
        expiry = self._expiry.get(key)
        if expiry is None:
            return False
        if expiry < time.monotonic():
            del self._expiry[key]
            return False
        self._expiry.move_to_end(key)
        return True

    def grant(self, key: tuple[str, str | None]) -> None:
        self._expiry[key] = time.monotonic() + self.ttl_s
        self._expiry.move_to_end(key)
        while len(self._expiry) > self.size:
            self._expiry.popitem(last=False)


def bearer(request: Request) -> str:
    header = request.headers.get("authorization")
    if not header:
        raise Unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("malformed Authorization header: expected 'Bearer <token>'")
    return token.strip()


def _check(store: SqlStore, token: str, ns: str | None) -> None:
    scope = store.token_scope(token)
    if ns is not None:
        store.authorize(scope, ns)


async def authenticate(
    request: Request, store: SqlStore, ns: str | None, grants: Grants | None = None
) -> None:
    """Refuse unless the bearer token may act on the namespace in the path (if any)."""
    token = bearer(request)
    key = (hash_token(token), ns)
    if grants is not None and grants.allowed(key):
        return
    await run_blocking(_check, store, token, ns)
    if grants is not None:
        grants.grant(key)
