"""Preemption and checkpoints (issue 35): what the store does when a box goes away.

A preemption is not the job's failure. A worker told its box is going away gives the attempt
back with outcome `preempted`: the job is queued again at once (no backoff) and is the next
claimed among its priority on every queue kind (`_resumed`); `preemptions` counts it, and
`max_attempts` is not charged (`attempt - preemptions` is). A lease that runs out with no
settle is counted the same way by the sweep (queries.sql, requeue_expired). `max_preemptions`
bounds them, so a job that can never finish between two preemptions still ends, failed, saying
so.

A checkpoint is an object in durable storage; the row holds only its encoded Ref (the last one
wins), written under the attempt's lease as a post is, and handed to the next attempt with its
claim. The store never reads the state itself.
"""

from __future__ import annotations

import time
from typing import Any

import msgpack

from dreamlake.lakeshore.errors import InvalidArgument, LeaseLost, NotFound
from dreamlake.lakeshore.plane.connector import Row, Transaction
from dreamlake.lakeshore.plane.queries import INT64_MIN
from dreamlake.lakeshore.storage import MAX_REF_BYTES, sniff_ref
from dreamlake.lakeshore.types import DEFAULT_MAX_PREEMPTIONS, END_CAUSES, QueueInfo, SubmitRequest

from . import gangs
from .gangs import GangStore
from .placement import fitted

#: What a claim binds that a read beside it does not (the lease it hands out).
_CLAIM_ONLY = frozenset({"expires", "worker", "lease"})

#: How a release ends an attempt: given back before it ran, or preempted while it ran.
RELEASE_OUTCOMES = ("unrun", "preempted")


def check_cause(cause: object) -> str:
    if cause not in END_CAUSES:
        raise InvalidArgument(f"unknown end cause {cause!r}; use {'|'.join(END_CAUSES)}")
    assert isinstance(cause, str)
    return cause


def check_outcome(outcome: object) -> str:
    if outcome not in RELEASE_OUTCOMES:
        raise InvalidArgument(
            f"unknown release outcome {outcome!r}; use {'|'.join(RELEASE_OUTCOMES)}"
        )
    assert isinstance(outcome, str)
    return outcome


def set_preemption_limit(
    tx: Transaction, inv_id: str, req: SubmitRequest, queue: QueueInfo
) -> None:
    """Store a new job's max_preemptions when its submit or its queue sets one (the column's
    default, DEFAULT_MAX_PREEMPTIONS, costs no statement)."""
    limit = req.max_preemptions
    if limit is None:
        limit = queue.admission.get("max_preemptions")
    if limit is not None and limit != DEFAULT_MAX_PREEMPTIONS:
        tx.all("set_max_preemptions", id=inv_id, max_preemptions=int(limit))


class PreemptionStore(GangStore):
    """The preempted release and the checkpoint write."""

    def _release_preempted(self, inv_id: str, lease: str, cause: str) -> bool:
        """Requeue a preempted attempt at once; True if it went back to the queue. A job out
        of preemptions ends failed instead (False), with an ERROR frame that says why."""
        cause = check_cause(cause)
        now = time.time()
        with self.connector.transaction() as tx:
            released = tx.one("release_preempted", id=inv_id, lease=lease, cause=cause)
            part = None
            if released is None:  # a gang's part, perhaps (gangs.py): the attempt is preempted
                fenced = self._fence(tx, inv_id, lease, "release", now)
                if fenced is None:  # a held part let go: its gang holds on without it
                    released = {"nodes": 1}
                elif fenced[1] is not None:
                    lease, part = fenced
                    released = tx.one("release_preempted", id=inv_id, lease=lease, cause=cause)
            if released is not None:
                requeued = True
                if released["nodes"] > 1:
                    gangs.ended_by(
                        tx,
                        inv_id,
                        part,
                        f"preempted ({cause})",
                        now,
                        first="preempted",
                        outcome="preempted",
                    )
            else:
                requeued = False
                row = tx.one("preemptions_of", id=inv_id)
                if row is None:
                    raise NotFound(f"unknown invocation '{inv_id}'")
                error = (
                    f"preempted {row['preemptions'] + 1} times ({cause} on attempt "
                    f"{row['attempt']}), past its max_preemptions of {row['max_preemptions']}, "
                    "so it can never finish"
                )
                if not tx.one(
                    "settle_terminal",
                    id=inv_id,
                    lease=lease,
                    state="failed",
                    error=error,
                    now=now,
                    cause=cause,
                ):
                    return False  # not this worker's attempt any more: nothing to give back
                tx.all("count_preemption", id=inv_id)
                gangs.ended_by(tx, inv_id, part, error, now, first="preempted")
                self._append(tx, inv_id, "ERROR", msgpack.packb(error), now)
        self.waker.notify()
        return requeued

    def _resumed(self, tx: Transaction, params: dict[str, Any]) -> Row | None:
        """On a filo queue, claim the job a preemption requeued before any other of its
        priority (issue 35): newest-first would put it behind every job submitted since. Only
        if nothing claimable outranks it. A fifo or boltzmann claim needs no such look: it
        takes the oldest of a priority, and the job's id is older than every submit since.
        One probe of an index empty but for such jobs (migration 34) when there is none."""
        fit = "_fit" if fitted(params) else ""
        probe = {k: v for k, v in params.items() if k not in _CLAIM_ONLY}
        head = tx.one("resumed_head" + fit, priority=INT64_MIN, **probe)
        if head is None:
            return None
        if tx.one("claimable_above" + fit, priority=head["priority"], **probe):
            return None
        return tx.one("claim_by_id", id=head["id"], **params)

    def note_cause(self, inv_id: str, lease: str, cause: str, *, ns: str | None = None) -> bool:
        """Record why the worker is about to end this attempt, before it signals the job;
        False when the attempt is no longer this lease's (nothing is written)."""
        cause = check_cause(cause)
        with self.connector.transaction() as tx:
            if ns is not None and tx.one("get_invocation", id=inv_id, ns=ns) is None:
                raise NotFound(f"unknown invocation '{inv_id}'")
            return tx.one("note_cause", id=inv_id, lease=lease, cause=cause) is not None

    def checkpoint(
        self, inv_id: str, lease: str, checkpoint: bytes, *, ns: str | None = None
    ) -> bytes | None:
        """Make `checkpoint` (an encoded spilled Ref of an object in durable storage) the job's
        last one, under the attempt's lease; returns the one it replaced (None: none), for its
        writer to delete. With `ns`, an id of another namespace is unknown."""
        check_checkpoint(checkpoint)
        now = time.time()
        with self.connector.transaction() as tx:
            if ns is not None and tx.one("get_invocation", id=inv_id, ns=ns) is None:
                raise NotFound(f"unknown invocation '{inv_id}'")
            held = tx.one("checkpoint_of", id=inv_id)
            if held is None:
                raise NotFound(f"unknown invocation '{inv_id}'")
            done = tx.one("set_checkpoint", id=inv_id, lease=lease, checkpoint=checkpoint, now=now)
            if done is None:
                raise LeaseLost(
                    f"checkpoint refused: invocation '{inv_id}' is {held['state']} and not held "
                    "under this lease (its lease expired, or it was re-dispatched or ended); "
                    "the previous checkpoint stays"
                )
        previous = held["checkpoint"]
        return None if previous is None else bytes(previous)


def check_checkpoint(checkpoint: object) -> bytes:
    """A checkpoint as the row keeps it: one encoded spilled Ref with a durable copy, a few
    hundred bytes. The state itself never goes into the row."""
    if not isinstance(checkpoint, (bytes, bytearray, memoryview)):
        raise InvalidArgument("a checkpoint is the encoded Ref of its object (bytes)")
    data = bytes(checkpoint)
    if len(data) > MAX_REF_BYTES or sniff_ref(data) is None:
        raise InvalidArgument(
            "a checkpoint is the encoded Ref of an object in durable storage (at most "
            f"{MAX_REF_BYTES} bytes; dls.run.checkpoint(value) makes one), not the state itself"
        )
    return data
