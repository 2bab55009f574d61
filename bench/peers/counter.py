"""Completion counting for fan-out runs: each peer task bumps one Redis counter (one INCR).

Its cost (one loopback round trip per job) is inside the peer's figure; Lakeshore's completion is
read from its own store instead. Only used when BENCH_COUNT_KEY is set (fan-out), never in RPC.
"""

from __future__ import annotations

import os

_client = None


def bump() -> None:
    global _client
    key = os.environ.get("BENCH_COUNT_KEY")
    if not key:
        return
    if _client is None:
        import redis

        _client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    _client.incr(key)
