"""Claims: which job a claimer takes, and taking it (the claim half of the invocation verbs).

Every claim comes through `_claim_in`, whichever path asked (a claim, an ack-and-claim, a
submit's hand-off): the kind is chosen, the steal and locality rules applied, and expired
leases swept on the way, in one place. Settling what was claimed is settle.py's."""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import msgpack

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.plane import delays, dependencies, locality
from dreamlake.lakeshore.plane.admission import waits_for_room
from dreamlake.lakeshore.plane.connector import Row, Transaction
from dreamlake.lakeshore.plane.queries import check_params
from dreamlake.lakeshore.plane.steal import steal_aged, stealing
from dreamlake.lakeshore.resources import check_free, fit_params
from dreamlake.lakeshore.types import (
    DEFAULT_QUEUE,
    Claim,
    ClaimArgs,
    Kind,
    QueueInfo,
    check_host,
    check_name,
    normalize_kind,
)

from . import gang_claims, gangs
from .base import MAX_BATCH, SWEEP_EVERY_S
from .placement import BOX, fitted, scarce
from .preemption import PreemptionStore
from .queues import QueueStore
from .records import boltzmann_level, check_addr, claim_of, queue_info_of
from .reservation import claim_reserving

#: Claim parameters the priority_levels statements do not bind.
_NOT_LEVELS = frozenset({"expires", "worker", "lease"})


class Claimed(NamedTuple):
    """What a claim's statements did inside its transaction."""

    rows: list[Row]
    #: Expired leases a sweep on the way ended or requeued (anything may have changed).
    expired: int
    #: Whether a submit blocked on a full queue (`waits_for_room`) may fit now.
    room: bool
    #: Jobs whose gang a part was held of (store/gangs.py): their parts' `gang` waits wake.
    gangs: tuple[str, ...] = ()


class ClaimStore(PreemptionStore, QueueStore):
    """Claims: the jobs a worker takes, in its kind's order, and the sweep a claim runs on its
    way."""

    def claim_many(self, ns: str, args: ClaimArgs) -> list[Claim]:
        """Up to `args.limit` jobs in `kind` order in one transaction; exactly one worker gets each.

        One commit for the batch is the point: a daemon that prefetches pays one durable write
        per batch instead of one per job. Each job is picked as a single claim would pick it,
        so a batch never reorders a queue. `host` is the claimer's host id: a job held for
        another host is passed by until its locality window ends (plane/locality.py). `free`
        is what the claimer has free (`resources.check_free`): then only a job that fits is
        taken, and one at most, since the next one's fit depends on where this one goes.
        """
        claiming = self._claiming(ns, args)
        # Not durable: a claim that a power cut undoes only puts its jobs back in the queue
        # (the worker's settle is then refused and they run again), and skipping its fsync
        # takes one of the three disk flushes out of every job's path.
        with self.connector.transaction(durable=False) as tx:
            claimed = self._claim_in(tx, claiming, args.kind, args.temperature, args.limit)
        self._claimed(claimed)
        return [claim_of(row) for row in claimed.rows]

    def _claiming(self, ns: str, args: ClaimArgs) -> dict[str, Any]:
        """A claim's checked parameters, as its statements bind them (with `free`, the
        `fits` fragment's too: `fitted` tells)."""
        names = [check_name(q) for q in args.queues] or [DEFAULT_QUEUE]
        if not 1 <= args.limit <= MAX_BATCH:
            raise InvalidArgument(f"a claim takes 1 to {MAX_BATCH} jobs, not {args.limit}")
        check_host(args.host)
        check_addr(args.addr, "a claim's addr")
        # Bound only when a job is taken: an empty claim must refuse it the same way.
        check_params({"worker": args.worker})
        now = time.time()
        checked = None if args.free is None else check_free(args.free)
        fit = {} if checked is None else fit_params(checked)
        if checked is not None and checked["box"] is not None:
            fit[BOX] = checked["box"]  # taken out before any statement binds it
        return {
            "ns": ns,
            "queues": names,
            "now": now,
            "expires": now + args.lease_s,
            "worker": args.worker,
            "host": args.host,
            "addr": args.addr,
            **fit,
        }

    def _claim_in(
        self,
        tx: Transaction,
        params: dict[str, Any],
        kind: str | None,
        temperature: float,
        limit: int,
        known: QueueInfo | None = None,
        within: str | None = None,
    ) -> Claimed:
        """Claim up to `limit` rows; `known`, a queue row this transaction read already;
        `within`, the one queue to take from (a submit's hand-off), else any of the claim's.

        Every claim comes here, whichever path asked: the kind is chosen and the steal rule
        applied (`_claim_rows`) in one place."""
        ns, names, now = params["ns"], params["queues"], params["now"]
        expired = 0
        if now - self._swept_at >= SWEEP_EVERY_S:
            self._swept_at = now
            expired = self._sweep(tx, now)
        window: Row | None = None
        if kind:
            resolved = normalize_kind(kind)
        else:  # the first queue's kind orders the claim
            if known is None or known.name != names[0]:
                # With the queue row, when these queues' next locality window ends: a claim
                # that finds nothing needs it, and asking now costs no statement of its own.
                window = tx.one("queue_for_claim", ns=ns, name=names[0], queues=names, now=now)
                known = queue_info_of(window) if window else None
            resolved = normalize_kind(known.kind) if known else "fifo"
        # Queues that hold nothing queued (an ack's claim that finds them empty, an idle
        # long-poll's safety poll) need no claim statement: the counters are exact, and this
        # transaction's own sweep has already counted what it requeued.
        promoted = window is not None and delays.promote_if_due(tx, params, window)
        empty = window is not None and not window["queued"] and not promoted
        if not empty and gang_claims.queued(tx, params, window):
            try:
                part = gang_claims.claim_part(tx, params, [within] if within else names, resolved)
            except gang_claims.Held:  # a worker holding a part of a gang not started takes nothing
                return Claimed([], expired, False)
            if part is not None:
                return Claimed(dependencies.with_inputs(tx, [part]), expired, False, (part["id"],))
        rows = [] if empty else self._claim_rows(tx, resolved, temperature, params, limit, within)
        if not rows:
            if window is None:
                window = tx.one("locality_next", ns=ns, queues=names, now=now)
                if window is not None and delays.promote_if_due(tx, params, window):
                    rows = self._claim_rows(tx, resolved, temperature, params, limit, within)
            if window is not None:
                locality.wake_at_window(self.waker, ns, names, window["next_window"])
                delays.wake_when_due(self.waker, ns, names, window["next_due"], now)
        rows = dependencies.with_inputs(tx, rows)
        return Claimed(rows, expired, bool(rows) and self._makes_room(tx, ns, rows, known))

    def _makes_room(
        self, tx: Transaction, ns: str, rows: Sequence[Row], known: QueueInfo | None
    ) -> bool:
        """Whether taking `rows` out of their queues may let in a submit blocked on one."""
        for name in {row["queue"] for row in rows}:
            info = known if known and known.name == name else self._queue_info(tx, ns, name)
            if info is not None and waits_for_room(info.admission):
                return True
        return False

    def _claimed(self, claimed: Claimed, *, acked: Sequence[str] = ()) -> None:
        """One wake-up for a claim's commit, and only to whom it may concern.

        A claim that swept may have changed anything. Acks end invocations: their readers
        wake. A claim alone brings no work and ends nothing: it wakes only submits blocked
        for room, and on a queue that cannot block them nobody at all, in this process or
        another (a datagram to every process on the box, for each job, is what it saves).
        """
        if claimed.gangs:  # a part held, or a gang started: its parts' `gang` waits
            self.waker.notify(work=(), reads=False, ended=claimed.gangs)
        if claimed.expired:
            self.waker.notify()
        elif acked:
            self.waker.notify(work=(), reads=False, ended=acked)
        elif claimed.room:
            self.waker.notify(work=(), reads=False)

    def _claim_rows(
        self,
        tx: Transaction,
        kind: Kind,
        temperature: float,
        params: dict[str, Any],
        limit: int,
        within: str | None,
    ) -> list[Row]:
        """Up to `limit` claimed rows, in the order single claims would have taken them: in
        `kind` order from the queues free to take now, then what has waited out its queue's
        steal delay (steal.py). A claimer that counts what it has free (issue 34) takes one job
        at a time, and on a fifo queue reserves for the head it could run (reservation.py)."""
        box = params.get(BOX)
        if box is not None:
            params = {k: v for k, v in params.items() if k != BOX}
        free, delayed = stealing(tx, params["ns"], params["queues"], within)
        if scarce(params):
            if box is not None and kind == "fifo" and free:
                row = claim_reserving(tx, {**params, "queues": free}, box)
                return [row] if row is not None else []
            limit = 1  # the next job's fit depends on where the claimer puts this one
        rows = self._claim_free(tx, kind, temperature, {**params, "queues": free}, limit)
        return rows + steal_aged(tx, params, delayed, limit - len(rows), fit=fitted(params))

    def _claim_free(
        self, tx: Transaction, kind: Kind, temperature: float, params: dict[str, Any], limit: int
    ) -> list[Row]:
        if not params["queues"]:
            return []
        if limit > 1 and kind == "fifo" and len(params["queues"]) == 1:
            name = "claim_fifo_batch_fit" if fitted(params) else "claim_fifo_batch"
            batch = tx.all(name, lease=secrets.token_hex(16), limit=limit, **params)
            return sorted(batch, key=lambda r: (-r["priority"], r["id"]))
        rows: list[Row] = []
        while len(rows) < limit:
            row = self._claim_row(tx, kind, temperature, {**params, "lease": secrets.token_hex(16)})
            if row is None:
                break
            rows.append(row)
        return rows

    def _queue_info(self, tx: Transaction, ns: str, name: str) -> QueueInfo | None:
        row = tx.one("get_queue", ns=ns, name=name)
        return queue_info_of(row) if row else None

    def _claim_row(
        self, tx: Transaction, kind: Kind, temperature: float, params: dict[str, Any]
    ) -> Row | None:
        fit = "_fit" if fitted(params) else ""
        if kind == "fifo":
            return tx.one("claim_fifo" + fit, **params)
        if kind == "filo":  # newest first, but a preempted job before all of its priority
            return self._resumed(tx, params) or tx.one("claim_filo" + fit, **params)
        levels = tx.all(
            "priority_levels" + fit,
            **{k: v for k, v in params.items() if k not in _NOT_LEVELS},
        )
        if not levels:
            return None
        level = boltzmann_level([(r["priority"], r["n"]) for r in levels], temperature)
        return tx.one("claim_level" + fit, priority=level, **params) or tx.one(
            "claim_fifo" + fit, **params
        )

    def _sweep(self, tx: Transaction, now: float) -> int:
        due = delays.promote_all_due(tx, now)
        timed_out = tx.all("expire_deadlines", now=now)
        requeued = tx.all("requeue_expired", now=now)
        ended = tx.all("end_expired", now=now)
        for row in ended:  # an ERROR frame, so a stream raises as result() does
            self._append(tx, row["id"], "ERROR", msgpack.packb(row["error"]), now)
        for row in [*requeued, *ended]:
            if row["nodes"] > 1:  # rank 0's lease (the row's): the gang's attempt is over
                gangs.ended_by(tx, row["id"], None, "lease of part 0 expired", now, first="lost")
        changed = gangs.sweep(tx, now, self._append_error)
        return due + len(timed_out) + len(requeued) + len(ended) + len(changed)
