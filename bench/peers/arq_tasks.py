"""arq's worker settings: BENCH_ARQ_POLL (poll_delay; arq's default 0.5 s)."""

from __future__ import annotations

import os
from typing import Any

from arq.connections import RedisSettings

from .counter import bump


async def noop(ctx: dict[str, Any], i: int = 0) -> int:
    bump()
    return i


class WorkerSettings:
    functions = [noop]
    redis_settings = RedisSettings.from_dsn(
        os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
    )
    queue_name = os.environ.get("BENCH_QUEUE", "arq:queue")
    poll_delay = float(os.environ.get("BENCH_ARQ_POLL", "0.5"))
