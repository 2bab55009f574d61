"""SqliteHuey at BENCH_HUEY_DB (fsync as BENCH_HUEY_FSYNC; Huey's default is off)."""

from __future__ import annotations

import os

from huey import SqliteHuey

from .counter import bump

huey = SqliteHuey(
    filename=os.environ.get("BENCH_HUEY_DB", "/tmp/bench-huey.db"),
    fsync=os.environ.get("BENCH_HUEY_FSYNC") == "1",
)


@huey.task()
def noop(i: int = 0) -> int:
    bump()
    return i
