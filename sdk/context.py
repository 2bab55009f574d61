"""Run scopes: the run an orchestrator is inside, and the per-run queue names derived from it.

`dls.context.run("sweep-42")` pushes a run id for the block it guards; `current_run()` reads it.
It is a `contextvars.ContextVar`, so it is local to a thread and to an asyncio task: a thread
starts with no run, a task starts with a copy of its creator's, and neither leaks back.

A job carries its submitter's run in its envelope (`Envelope.run`), and the worker puts it back
around the body (`execute.run_body`), so a child submitted from inside a job inherits the run of
its parent, in the in-process worker loop and in the daemon's child processes alike.

`@udf(queue=q, scope="run")` submits to `run_queue_name(q.name, run)`: `<queue>-run-<slug>`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from .errors import InvalidArgument
from .types import MAX_NAME_LENGTH, check_name

__all__ = ["current_run", "is_run_queue_name", "run", "run_queue_name"]

#: The run id a block runs under; None outside every run.
_RUN: ContextVar[str | None] = ContextVar("lakeshore_run", default=None)

#: What separates a queue's name from its run's slug in a run queue's name.
RUN_INFIX = "-run-"
#: Hex digits of sha256(run id) appended when the slug had to be shortened or came out empty.
HASH_CHARS = 8
MAX_RUN_ID_LENGTH = 1024

_INVALID = re.compile(r"[^a-z0-9]+")


def check_run_id(run_id: object) -> str:
    if not isinstance(run_id, str) or not run_id.strip() or len(run_id) > MAX_RUN_ID_LENGTH:
        raise InvalidArgument(
            f"a run id is a non-empty string of at most {MAX_RUN_ID_LENGTH} characters, "
            f"got {run_id!r}"
        )
    return run_id


def current_run() -> str | None:
    """The run id of the innermost `run(...)` block around this call, or None."""
    return _RUN.get()


@contextmanager
def run(run_id: str | None) -> Iterator[str | None]:
    """Run the block under `run_id` (None: outside any run); restores the outer run on exit."""
    token = _RUN.set(None if run_id is None else check_run_id(run_id))
    try:
        yield run_id
    finally:
        _RUN.reset(token)


def run_queue_name(queue: str, run_id: str) -> str:
    """The wire name of `queue`'s per-run queue: `<queue>-run-<slug>`, valid as a queue name.

    The slug is the run id lowercased, every run of characters outside [a-z0-9] turned into one
    '-', and '-' trimmed from both ends ("Sweep_42" -> "sweep-42"). When that would make the
    name longer than 128 characters, the slug is cut and `-<8 hex of sha256(run id)>` appended;
    a slug that comes out empty ("___") is replaced by that hash alone. Run ids that differ only
    in case or punctuation share a queue.
    """
    check_name(queue)
    run_id = check_run_id(run_id)
    slug = _INVALID.sub("-", run_id.lower()).strip("-")
    name = f"{queue}{RUN_INFIX}{slug}"
    if slug and len(name) <= MAX_NAME_LENGTH:
        return name
    import hashlib  # OpenSSL's: a few ms a producer that scopes no run never pays

    digest = hashlib.sha256(run_id.encode()).hexdigest()[:HASH_CHARS]
    if len(queue) + len(RUN_INFIX) + HASH_CHARS > MAX_NAME_LENGTH:
        raise InvalidArgument(
            f"queue name '{queue}' is too long to scope by run: a run queue's name is "
            f"'<queue>{RUN_INFIX}<slug>', at most {MAX_NAME_LENGTH} characters"
        )
    room = MAX_NAME_LENGTH - len(queue) - len(RUN_INFIX) - HASH_CHARS - 1
    head = slug[: max(room, 0)].strip("-")
    return f"{queue}{RUN_INFIX}{head}-{digest}" if head else f"{queue}{RUN_INFIX}{digest}"


def is_run_queue_name(name: str) -> bool:
    return RUN_INFIX in name
