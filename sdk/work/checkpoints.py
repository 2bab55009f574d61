"""A job's checkpoint, stored by the worker that holds its lease (issue 35).

The body encodes its state (`dls.run.checkpoint`); the worker writes it to durable storage as a
spilled object, then its Ref to the row under the attempt's lease (`Plane.checkpoint`), and
only then tells the body it is safe. The row never holds the state, so a checkpoint of 256 MiB
costs the row what one of 1 KiB does. The checkpoint it replaced is deleted once the new one is
on the row: by this worker where it can reach it (a file:// or s3:// storage), by the server for
a plane-tier copy (a worker has no power to delete those: server/routes_objects.py,
`drop_superseded`). The last one goes with its row, when retention trims it.

Where the object goes: the worker's `--storage` when it has one, else its plane's storage when
that plane is over HTTP (the plane tier: every box that reaches the server reads it back), else
the box's storage ($LAKESHORE_STORAGE, or $LAKESHORE_HOME/storage), which is what an embedded
plane's workers share.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
from typing import TYPE_CHECKING, Any, Protocol

from dreamlake.lakeshore import codec
from dreamlake.lakeshore.errors import DispatchError
from dreamlake.lakeshore.storage import sniff_ref
from dreamlake.lakeshore.types import Claim

from .retry import GaveUp

if TYPE_CHECKING:
    from dreamlake.lakeshore.plane.base import Plane

    from .config import WorkerConfig
    from .retry import Retrier


class WorkerCore(Protocol):
    """What these need of the worker (`work.core.WorkerCore`, which imports this module): its
    plane, its settings, its retrier, its stop-at-once event and its log."""

    plane: Plane
    config: WorkerConfig
    _retry: Retrier
    _urgent: threading.Event
    _log: Any


def store(core: WorkerCore, claim: Claim, data: bytes) -> bytes | None:
    """`store_checkpoint` through the core's retrier (an unreachable plane is waited out, up
    to a stop at once); a refusal raises as the plane said it.

    A gang's checkpoint is rank 0's (issue 47): every rank of the next attempt reads it back,
    and ranks hold the same state in data-parallel training, so another rank's checkpoint is
    not stored; it returns at once, its `last_checkpoint()` still the one its attempt began
    from. (Torch code guards its save with `if rank == 0`; a body that does not is not charged
    N copies of its state.)"""
    if (claim.gang or {}).get("rank", 0) > 0:
        core._log.debug("job.checkpoint_left_to_rank_0", invocation=claim.id)
        return claim.checkpoint
    try:
        return core._retry.call(
            "checkpoint",
            lambda: store_checkpoint(core.plane, core.config.storage, claim, data),
            give_up=core._urgent,
        )
    except GaveUp:
        raise DispatchError("the checkpoint was not stored: the worker is stopping") from None


def mark_resume(core: WorkerCore, claim: Claim) -> None:
    """Post the RESUME frame of an attempt that takes a job up again; a refusal is logged (the
    job still runs: the marker is for readers, not for the job)."""
    value = resume_frame(claim)
    if value is None:
        return
    post_id = secrets.token_hex(12)

    def post() -> int:
        return core.plane.post(claim.id, "RESUME", value, lease=claim.lease, post_id=post_id)

    try:
        core._retry.call("post", post, give_up=core._urgent)
    except (GaveUp, DispatchError) as exc:
        core._log.warning("job.resume_unmarked", invocation=claim.id, error=str(exc))


def note_cause(core: WorkerCore, claim: Claim, cause: str) -> None:
    """One try at recording why the attempt is about to end; a failure is logged and the kill
    goes ahead (the settle that follows records the cause again)."""
    try:
        core.plane.note_cause(claim.id, claim.lease, cause)
    except Exception as exc:
        core._log.warning("job.cause_unrecorded", invocation=claim.id, error=str(exc))


def store_checkpoint(plane: Any, storage: str | None, claim: Claim, data: bytes) -> bytes:
    """Store `data` (a codec encoding) as `claim`'s checkpoint; the encoded Ref on its row.

    Raises what the storage or the plane refused (too large, the lease lost); the row's
    previous checkpoint then stays, and the object this made is deleted again."""
    from dreamlake.lakeshore import objects  # the object store: imported by the first checkpoint

    ref = objects.put_encoded(data, durable=True, storage=_target(plane, storage), spilled=True)
    blob = codec.encode(ref)
    try:
        previous = plane.checkpoint(claim.id, claim.lease, blob)
    except BaseException:
        _delete(blob)
        raise
    if previous is not None and previous != blob:
        _delete(previous)
    return blob


def _target(plane: Any, storage: str | None) -> Any:
    if storage:
        return storage
    tier = getattr(plane, "object_tier", None)  # HttpDispatch: the plane tier
    return tier() if tier is not None else None


def _delete(blob: bytes) -> None:
    """Delete a checkpoint's durable copy where this worker can; best effort (an orphan at
    worst, which retention does not find: the row no longer names it)."""
    from dreamlake.lakeshore.objects.plane import is_plane_url

    ref = sniff_ref(blob)
    if ref is None or is_plane_url(ref.url):
        return
    with contextlib.suppress(Exception):
        ref.delete()


def resume_frame(claim: Claim) -> bytes | None:
    """The RESUME frame's value for an attempt that takes a job up again (after a preemption,
    or with a checkpoint to start from): its attempt, preemptions so far, and the id of the
    checkpoint it starts from. None for a job's first run."""
    if claim.attempt <= 1 or not (claim.preemptions or claim.checkpoint):
        return None
    ref = sniff_ref(claim.checkpoint) if claim.checkpoint else None
    return codec.encode(
        {
            "attempt": claim.attempt,
            "preemptions": claim.preemptions,
            "checkpoint": ref.key.rsplit("/", 1)[-1] if ref is not None else None,
        }
    )
