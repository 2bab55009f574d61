"""The attempt a job body runs in, as a context variable: `dls.run.current()` reads it.

Kept apart from `run.py` (the body's API: keys, storage I/O, checkpoints) so that the modules
`dls.run` builds on, spill among them, can ask which job they run in without importing it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .attempt import AttemptLink
from .storage import Storage
from .storage import storage as open_storage

__all__ = ["SCOPE", "JobContext", "current", "job"]


@dataclass(frozen=True)
class JobContext:
    """The attempt a body runs in: its invocation id, attempt number, storage and stream."""

    id: str
    attempt: int
    #: The storage as `job` was given it (a URL, a Storage, None for the default): resolved on
    #: first use, because most bodies never touch storage and working out the default (the
    #: environment, the home folder, a file:// URI) was most of a no-op job's CPU in a child.
    storage_at: str | Storage | None = field(repr=False)
    post: Callable[[Any], None]
    queue: str | None = None
    #: The GPUs the job was placed on, as its CUDA_VISIBLE_DEVICES numbers them (issue 34).
    gpus: tuple[int, ...] = ()
    #: The attempt's checkpoints and preemption notice (attempt.py); None where the worker
    #: offers neither (a body run by hand through `run_body`).
    link: AttemptLink | None = None

    @cached_property
    def storage(self) -> Storage:
        return open_storage(self.storage_at)


_JOB: ContextVar[JobContext | None] = ContextVar("lakeshore_job", default=None)
#: The key prefix in force (`dls.scope`): a job starts at the storage root.
SCOPE: ContextVar[str] = ContextVar("lakeshore_scope", default="")


def _placed_gpus() -> tuple[int, ...]:
    """The GPUs a daemon placed this job on: its child's LAKESHORE_GPUS (a child sees one
    placement; the daemon replaces a child whose GPUs differ from the next job's)."""
    text = os.environ.get("LAKESHORE_GPUS", "")
    return tuple(int(i) for i in text.split(",") if i.strip().isdigit())


def current() -> JobContext | None:
    """The job around this call, or None outside one."""
    return _JOB.get()


@contextmanager
def job(
    inv_id: str,
    attempt: int = 1,
    *,
    post: Callable[[Any], None],
    storage: str | Storage | None = None,
    queue: str | None = None,
    link: AttemptLink | None = None,
) -> Iterator[JobContext]:
    """Run the block as the body of attempt `attempt` of `inv_id` (set up by `run_body`).

    A job starts at the storage root: scopes of whoever called the worker do not leak in.
    """
    ctx = JobContext(inv_id, attempt, storage, post, queue, _placed_gpus(), link)
    job_token = _JOB.set(ctx)
    scope_token = SCOPE.set("")
    try:
        yield ctx
    finally:
        SCOPE.reset(scope_token)
        _JOB.reset(job_token)
