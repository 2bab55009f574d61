"""Dramatiq's broker with its Results middleware (Redis backend), and the no-op actor."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.results import Results
from dramatiq.results.backends import RedisBackend

from .counter import bump

URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
broker = RedisBroker(url=URL, namespace=os.environ.get("BENCH_QUEUE", "bench"))
broker.add_middleware(Results(backend=RedisBackend(url=URL)))
dramatiq.set_broker(broker)


@dramatiq.actor(store_results=True, max_retries=0)
def noop(i: int = 0) -> int:
    bump()
    return i
