"""Telling an unreachable plane from a refusal, and backing off while it is unreachable.

A daemon on a GPU box outlives network blips and control-plane restarts: while the plane cannot be
reached it keeps its children running and retries with jittered exponential backoff. A *refusal*
(`LeaseLost`, `NotFound`, bad input) is an answer, not an outage, and is never retried.
"""

from __future__ import annotations

import random
import sqlite3

import httpx

from ..errors import DispatchError

#: Backoff bounds while the plane is unreachable.
BACKOFF_BASE_S = 0.2
BACKOFF_CAP_S = 10.0


def is_transient(exc: BaseException) -> bool:
    """True for failures worth retrying: no connection, a timeout, a busy database, a 5xx."""
    if isinstance(exc, DispatchError):
        # HttpDispatch wraps a failed connection in a plain DispatchError: the cause tells.
        cause = exc.__cause__
        return exc.status >= 500 or (cause is not None and is_transient(cause))
    return isinstance(exc, (OSError, TimeoutError, httpx.TransportError, sqlite3.OperationalError))


class Backoff:
    """Full-jitter exponential backoff (AWS architecture blog): spreads a fleet's reconnects."""

    def __init__(self, base_s: float = BACKOFF_BASE_S, cap_s: float = BACKOFF_CAP_S) -> None:
        self.base_s = base_s
        self.cap_s = cap_s
        self.failures = 0

    def next(self) -> float:
        self.failures += 1
        ceiling = min(self.cap_s, self.base_s * 2 ** (self.failures - 1))
        return random.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.failures = 0
