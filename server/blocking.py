"""Blocking store calls off the event loop, on a plain thread pool.

Starlette's `run_in_threadpool` goes through anyio (a capacity limiter, a cancel scope, task
bookkeeping): profiled on this server that machinery cost about a third of the event loop's
busy time during an RPC, more than the routing and the response together. A store call needs
none of it: it is short, never cancelled half-way (an abandoned call still finishes and commits,
as it would under anyio), and bounded by the store itself (SQLite has one connection, Postgres a
pool). So: `loop.run_in_executor` on one pool for the process, with the caller's contextvars.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

#: As many as anyio's default limiter: long-polls hold no thread, so this bounds only the store
#: calls running at once, which the store's own lock or pool serialises further.
MAX_THREADS = 40

_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(MAX_THREADS, thread_name_prefix="lakeshore-store")
    return _pool


async def run_blocking(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` on the store's thread pool; the loop serves others meanwhile."""
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_executor(), call)
