"""`run_worker`: the in-process worker loop (the daemon runs the same bodies in child processes).

It is the embedded counterpart of `lakeshore-daemon`: claim, run the body, post its yields,
settle. `once=True` runs at most one job, which makes tests deterministic; `burst=True` runs
until the queues are empty (arq's burst mode).
"""

from __future__ import annotations

import contextlib
import threading
import traceback
from collections.abc import Sequence
from typing import Any

from . import codec, spill
from .errors import LeaseLost
from .execute import Handler, run_body
from .plane.base import Plane
from .plane.default import default_plane
from .queue import DEFAULT_LEASE_S, Queue, SyncQueue, worker_identity
from .storage import Storage
from .types import Claim

#: How long an idle loop's claim waits on the plane's wake-up before looking again.
CLAIM_WAIT_S = 1.0


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
) -> int:
    """Serve jobs until stopped; returns how many ran.

    `queues=None` serves every queue of the plane (or the one queue passed in place of a plane).
    `storage` is what bodies read and write through `dls.run` and where big results spill
    (default: `$LAKESHORE_STORAGE`, else `$LAKESHORE_HOME/storage`).
    """
    # A queue handle claims for itself, so its temperature and anneal schedule apply.
    handle = plane.sync if isinstance(plane, Queue) else plane
    own = handle if isinstance(handle, SyncQueue) and queues is None and kind is None else None
    plane, queues, kind = _resolve(plane, queues, kind)
    stop = stop or threading.Event()
    worker = worker_identity()
    ran = 0
    while not stop.is_set():
        names = (
            list(queues)
            if queues is not None
            else [q.name for q in plane.queues() if q.namespace == plane.namespace]
        )
        wait = 0.0 if (once or burst) else CLAIM_WAIT_S
        if own is not None:
            claim = own.claim_raw(wait=wait, lease_s=lease_s, worker=worker)
        else:
            claim = plane.claim(names, worker=worker, lease_s=lease_s, kind=kind, wait_s=wait)
        if claim is None:
            if once or burst:
                break
            continue
        run_claim(plane, claim, handler, storage=storage)
        ran += 1
        if once:
            break
    return ran


def _resolve(
    target: Plane | SyncQueue | Queue | None, queues: Sequence[str] | None, kind: str | None
) -> tuple[Plane, Sequence[str] | None, str | None]:
    if isinstance(target, Queue):
        target = target.sync
    if isinstance(target, SyncQueue):
        return target.dispatch, queues or [target.name], kind or target.kind
    return target or default_plane(), queues, kind


def run_claim(
    plane: Plane,
    claim: Claim,
    handler: Handler | None = None,
    *,
    storage: str | Storage | None = None,
) -> None:
    """Run one claimed job in this thread and settle it; a lost lease drops the outcome.

    A result above the inline limit is spilled to `storage` and acked as its ref.
    """

    def emit(value: Any) -> None:
        plane.post(claim.id, "VALUE", codec.encode(value), lease=claim.lease)

    try:
        payload = codec.decode(claim.payload)
        result = run_body(
            payload, emit, handler, inv_id=claim.id, attempt=claim.attempt, storage=storage
        )
        encoded = spill.dumps(result, storage=storage)
    except Exception as exc:
        error = "".join(traceback.format_exception(exc))
        # A lost lease means the job was re-dispatched: the newer attempt owns the outcome.
        with contextlib.suppress(LeaseLost):
            plane.nack(claim.id, claim.lease, error=error, retry=False)
        return
    with contextlib.suppress(LeaseLost):
        plane.ack(claim.id, claim.lease, encoded)
