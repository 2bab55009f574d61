"""`run_worker`: the worker core with inline slots, in the calling process.

It is the embedded counterpart of `lakeshore-daemon` and runs the same core (work/core.py):
it registers a worker row, renews its leases while a body runs, hears kill requests, verifies
payload signatures, batches acks and drains. Only the slots differ: a body runs on a thread here
(work/inline.py), in a child process there. `once=True` runs at most one job, which makes tests
deterministic; `burst=True` runs until the queues are empty (arq's burst mode).
"""

from __future__ import annotations

import itertools
import os
import re
import socket
import threading
from collections.abc import Sequence

from . import signing
from .execute import Handler
from .home import home
from .plane.base import Plane
from .plane.default import default_plane
from .queue import DEFAULT_LEASE_S, Queue, SyncQueue
from .storage import Storage
from .types import MAX_NAME_LENGTH, NAME_PATTERN, Claim
from .work.core import BURST_GIVE_UP_S, WorkerConfig, WorkerCore
from .work.inline import InlineSlot
from .work.slot import JobSink

#: How long an idle worker's claim waits on the plane's wake-up before it looks around again
#: (its stop event, membership): the bound on how late it notices either.
CLAIM_WAIT_S = 1.0

_serial = itertools.count(1)


def run_worker(
    plane: Plane | SyncQueue | Queue | None = None,
    queues: Sequence[str] | None = None,
    *,
    once: bool = False,
    burst: bool = False,
    handler: Handler | None = None,
    kind: str | None = None,
    lease_s: float = DEFAULT_LEASE_S,
    stop: threading.Event | None = None,
    storage: str | Storage | None = None,
    concurrency: int = 1,
    max_jobs: int | None = None,
    signing_key: bytes | None = None,
) -> int:
    """Serve jobs until stopped; returns how many ran.

    `queues=None` serves every queue of the plane (or the one queue passed in place of a plane).
    `storage` is what bodies read and write through `dls.run` and where big results spill
    (default: `$LAKESHORE_STORAGE`, else `$LAKESHORE_HOME/storage`). Setting `stop` drains: the
    running job finishes, then the call returns. `once=True` is `max_jobs=1, burst=True`.
    `signing_key` defaults to the box's key (`LAKESHORE_SIGNING_KEY`, else
    `$LAKESHORE_HOME/signing.key`), as the daemon's does.
    """
    core = inline_worker(
        plane,
        queues,
        burst=burst or once,
        max_jobs=1 if once else max_jobs,
        handler=handler,
        kind=kind,
        lease_s=lease_s,
        storage=storage,
        concurrency=concurrency,
        signing_key=signing_key,
    )
    finished = threading.Event()
    watcher = _watch(stop, core, finished) if stop is not None else None
    try:
        core.run()
    finally:
        finished.set()
        if watcher is not None:
            watcher.join()
    if core.fatal is not None:
        raise core.fatal
    return core.started_jobs


def inline_worker(
    plane: Plane | SyncQueue | Queue | None = None,
    queues: Sequence[str] | None = None,
    *,
    burst: bool = False,
    burst_wait_s: float = 0.0,
    max_jobs: int | None = None,
    handler: Handler | None = None,
    kind: str | None = None,
    lease_s: float = DEFAULT_LEASE_S,
    storage: str | Storage | None = None,
    concurrency: int = 1,
    signing_key: bytes | None = None,
) -> WorkerCore:
    """The core `run_worker` runs, unstarted: for callers that drive it themselves."""
    handle = plane.sync if isinstance(plane, Queue) else plane
    own = handle if isinstance(handle, SyncQueue) and queues is None and kind is None else None
    target, names, kind = _resolve(plane, queues, kind)
    config = WorkerConfig(
        name=inline_name(),
        queues=None if names is None else tuple(names),
        concurrency=concurrency,
        burst=burst,
        burst_wait_s=burst_wait_s,
        give_up_unreachable_s=BURST_GIVE_UP_S if burst else None,
        max_jobs=max_jobs,
        lease_s=lease_s,
        kind=kind,
        claim_wait_s=CLAIM_WAIT_S,
        storage=storage if isinstance(storage, str) else None,
        signing_key=signing_key if signing_key is not None else signing.load_key(home()),
        raise_refusals=True,
    )

    def slot(index: int, sink: JobSink) -> InlineSlot:
        return InlineSlot(index, sink, handler=handler, storage=storage, plane=target)

    if own is None:  # the core claims (and lets each finished job's ack ride on the next claim)
        return WorkerCore(target, config, slot)

    def claim(names: Sequence[str], limit: int, wait_s: float) -> list[Claim]:
        # A queue handle claims for itself, so its temperature and anneal schedule apply. It
        # names this box's host, as the row does: jobs whose objects live here come here first.
        from .objects import host_id

        one = own.claim_raw(wait=wait_s, lease_s=lease_s, worker=config.name, host=host_id())
        return [] if one is None else [one]

    return WorkerCore(target, config, slot, claimer=claim)


def _resolve(
    target: Plane | SyncQueue | Queue | None, queues: Sequence[str] | None, kind: str | None
) -> tuple[Plane, Sequence[str] | None, str | None]:
    if isinstance(target, Queue):
        target = target.sync
    if isinstance(target, SyncQueue):
        return target.dispatch, queues or [target.name], kind or target.kind
    return target or default_plane(), queues, kind


def _watch(stop: threading.Event, core: WorkerCore, finished: threading.Event) -> threading.Thread:
    """Drain the core once `stop` is set; looks at most CLAIM_WAIT_S apart, ends with the core."""

    def watch() -> None:
        while not finished.is_set():
            if stop.wait(CLAIM_WAIT_S):
                core.drain("the stop event was set")
                return

    thread = threading.Thread(target=watch, name="lakeshore-stop-watch", daemon=True)
    thread.start()
    return thread


def inline_name(host: str | None = None, pid: int | None = None) -> str:
    """`<hostname>-<pid>-<n>`: one worker row per `run_worker` call, in the name alphabet."""
    return default_name(host, pid, suffix=f"-{next(_serial)}")


def default_name(host: str | None = None, pid: int | None = None, suffix: str = "") -> str:
    """`<hostname>-<pid>`, folded into the worker-name alphabet (^[a-z0-9][a-z0-9-]*$)."""
    host = (host if host is not None else socket.gethostname()).split(".")[0].lower()
    host = re.sub(r"[^a-z0-9-]+", "-", host).strip("-") or "worker"
    suffix = f"-{pid if pid is not None else os.getpid()}{suffix}"
    name = host[: MAX_NAME_LENGTH - len(suffix)].rstrip("-") + suffix
    return name if NAME_PATTERN.fullmatch(name) else f"worker{suffix}"
