"""The Celery app the bench's workers run: BENCH_BROKER_URL, BENCH_BACKEND_URL."""

from __future__ import annotations

import os

from celery import Celery

from .counter import bump

app = Celery(
    "bench",
    broker=os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/13"),
    backend=os.environ.get("BENCH_BACKEND_URL", "redis://127.0.0.1:6379/13"),
)
app.conf.update(
    task_default_queue=os.environ.get("BENCH_QUEUE", "bench"),
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


@app.task(name="noop")
def noop(i: int = 0) -> int:
    bump()
    return i
