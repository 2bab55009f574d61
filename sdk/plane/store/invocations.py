"""Invocations: submit (which may create its queue), read, count, cancel, list and retry.

What a producer or an operator does to a row that no worker holds: nothing here takes a lease.
Claiming is in claims.py and settling in settle.py; `InvocationStore` builds on both.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from dreamlake.lakeshore import signing
from dreamlake.lakeshore.errors import Conflict, InvalidArgument, NotFound
from dreamlake.lakeshore.plane import dependencies, locality
from dreamlake.lakeshore.plane.admission import admit, deadline_for
from dreamlake.lakeshore.plane.connector import Row, Transaction
from dreamlake.lakeshore.plane.wakeup import kill_key, work_key
from dreamlake.lakeshore.types import (
    MAX_LIST_LIMIT,
    Claim,
    ClaimArgs,
    Invocation,
    QueueInfo,
    SubmitRequest,
    check_name,
    check_state,
)

from . import gangs
from .base import (
    new_id,
)
from .claims import Claimed
from .placement import asked, write_request
from .preemption import set_preemption_limit
from .records import (
    check_map_id,
    check_submit,
    claim_of,
    due_time,
    invocation_of,
    owned_objects,
    queue_info_of,
)
from .runtimes import write_runtime
from .settle import SettleStore


class InvocationStore(SettleStore):
    """Invocations: submit (which may create its queue), read, count, cancel, list, retry."""

    def submit(
        self,
        ns: str,
        queue: str,
        requests: Sequence[SubmitRequest],
        *,
        sync_later: bool = False,
    ) -> list[str]:
        """Enqueue a batch in one transaction; a key already used returns the existing id.
        `sync_later`: the transaction owes its fsync (`Connector.transaction`), and the caller
        hands out no id before `connector.sync(mark)`."""
        ids, _ = self.submit_handing(ns, queue, requests, (), sync_later=sync_later)
        return ids

    def submit_handing(
        self,
        ns: str,
        queue: str,
        requests: Sequence[SubmitRequest],
        claimers: Sequence[ClaimArgs],
        *,
        sync_later: bool = False,
    ) -> tuple[list[str], list[list[Claim]]]:
        """`submit`, then a claim for each of `claimers` (claims waiting on this queue) in the
        same transaction: (the ids, each claimer's claims).

        A claim already waiting when the job arrives takes it with the commit that makes it,
        instead of being woken to claim it in a transaction of its own. Each claim picks its
        jobs as `claim_many` would (its kind, its steal rule), so handing one over never
        reorders a queue nor lets a job be stolen early; but only from `queue`, though it may
        serve others: they had nothing for it when it last looked, and a transaction that took
        this queue's counter rows must not go on to lock another queue's (two such submits
        would deadlock on Postgres)."""
        check_name(queue)
        for req in requests:
            check_submit(req)
        now = time.time()
        # Ids in request order (ULIDs: the claim order of equal priorities); rows inserted in key
        # order, so two concurrent batches sharing keys lock them in one order and never
        # deadlock each other (Postgres holds each inserted key's index entry to commit).
        ids = [req.id or new_id() for req in requests]
        order = sorted(range(len(requests)), key=lambda i: requests[i].key or "")
        claiming = [(self._claiming(ns, c), c) for c in claimers]
        handed: list[Claimed] = []
        minted = [req.id for req in requests if req.id is not None]
        with self.connector.transaction(sync_later=sync_later) as tx:
            # One statement reads the queue row and whether any minted id exists: where they
            # live is read only when some do (a submit sent again), or for a queue not made yet.
            row = (
                tx.one("queue_for_submit", ns=ns, name=queue, ids=minted)
                if minted
                else tx.one("get_queue", ns=ns, name=queue)
            )
            taken = minted and (row is None or row["ids_taken"])
            if taken and self._submitted_before(tx, ns, queue, requests, minted):
                # The same submit again, its answer lost: the jobs it made.
                return ids, [[] for _ in claimers]
            info = self._insert(tx, ns, queue, requests, ids, order, now, row)
            for params, c in claiming:
                claimed = self._claim_in(tx, params, c.kind, c.temperature, c.limit, info, queue)
                handed.append(claimed)
        if sum(len(h.rows) for h in handed) < len(requests):
            # Only this queue's claim polls re-read; no reader waits on a job that did not exist.
            self.waker.notify(work=[work_key(ns, queue)], reads=False)
        self._claimed(
            Claimed(
                [row for h in handed for row in h.rows],
                sum(h.expired for h in handed),
                any(h.room for h in handed),
                tuple(i for h in handed for i in h.gangs),
            )
        )
        return ids, [[claim_of(row) for row in h.rows] for h in handed]

    def _insert(
        self,
        tx: Transaction,
        ns: str,
        queue: str,
        requests: Sequence[SubmitRequest],
        ids: list[str],
        order: Sequence[int],
        now: float,
        row: Row | None,
    ) -> QueueInfo:
        """Admit and insert `requests` into `queue` (its row as read: None makes it), in
        `order`; `ids` becomes each one's id (an existing job's where its key was used). A
        schedule's firing submits through here too, inside its own transaction."""
        info = self._queue_for_submit(tx, ns, queue, now, row)
        admit(tx, info, requests, now)
        # Parents before any insert: their row locks come before the counters' (a parent's
        # settle takes them in that order too), and an unknown one refuses the whole batch.
        planned = dependencies.plan(tx, ns, requests, now)
        inserted: set[int] = set()
        for i in order:
            req = requests[i]
            key = self.signing_key
            # A delayed job's start deadline and locality window run from its due time.
            due = due_time(req, now)
            start = now if due is None else due
            waiting = planned.get(i)
            row = tx.one(
                "insert_invocation_signed",
                id=ids[i],
                ns=ns,
                queue=queue,
                state=(waiting and waiting.state) or ("queued" if due is None else "scheduled"),
                not_before=start if due is not None else 0,
                priority=float(req.priority),
                key=req.key,
                payload=req.payload,
                max_attempts=req.max_attempts,
                timeout_s=req.timeout_s,
                now=now,
                deadline_at=deadline_for(info, start),
                signature=signing.sign(key, ns, queue, ids[i], bytes(req.payload)) if key else None,
                locality_host=req.host,
                locality_until=locality.window_end(info, req.host, start),
                objects=owned_objects(req.objects),
                map_id=req.map_id,
                **dependencies.row_fields(req, waiting, now),
            )
            if row is None:  # the key exists: idempotent resubmit
                row = tx.one("id_by_key", ns=ns, queue=queue, key=req.key)
                assert row is not None  # the conflict that suppressed the insert
            else:
                inserted.add(i)
                set_preemption_limit(tx, row["id"], req, info)
                if (wanted := asked(req.resources, info)) is not None:
                    write_request(tx, row["id"], wanted)
                if req.runtime is not None:
                    write_runtime(tx, ns, row["id"], req.runtime)
                if req.nodes != 1:  # a gang (issue 47): one statement more for it alone
                    tx.all("set_invocation_nodes", id=row["id"], nodes=req.nodes)
                if req.hang_timeout_s is not None:  # likewise: only a job that asks for it
                    tx.all(
                        "set_invocation_hang_timeout",
                        id=row["id"],
                        hang_timeout_s=float(req.hang_timeout_s),
                    )
            ids[i] = row["id"]
        dependencies.link(tx, ns, planned, requests, ids, inserted, now)
        return info

    def _submitted_before(
        self,
        tx: Transaction,
        ns: str,
        queue: str,
        requests: Sequence[SubmitRequest],
        minted: Sequence[str],
    ) -> bool:
        """Whether this batch, by the ids its producer `minted`, was submitted already.

        A batch commits whole, so its ids exist all or none: all, in this namespace and queue,
        is a repeat (admitted then, not counted again now); some, or elsewhere, is another
        submit's ids, refused without saying whose.
        """
        homes = tx.all("invocation_homes", ids=list(minted))
        if not homes:
            return False
        if len(homes) == len(minted) == len(requests) and all(
            h["namespace"] == ns and h["queue"] == queue for h in homes
        ):
            return True
        raise Conflict(
            "these invocation ids are taken: a submit sent again repeats all of its ids on "
            "the same queue; a new submit mints new ones (or leaves them to the plane)"
        )

    def _queue_for_submit(
        self, tx: Transaction, ns: str, queue: str, now: float, row: Row | None
    ) -> QueueInfo:
        """The queue a submit goes to, from its `row` as read (None: made now, as fifo)."""
        if row is None:
            self._create_queue_row(tx, ns, queue, "fifo", "", now)
            row = tx.one("get_queue", ns=ns, name=queue)
            assert row is not None
        info = queue_info_of(row)
        if info.state != "active":
            raise Conflict(
                f"queue '{queue}' is {info.state}: it accepts no submits"
                + (" (unarchive it to reopen)" if info.state == "archived" else "")
            )
        return info

    def invocation(self, ns: str, inv_id: str) -> Invocation:
        with self.connector.transaction(write=False) as tx:
            row = tx.one("get_invocation", id=inv_id, ns=ns)
            after = (
                None
                if row is None or row["open_parents"] is None
                else dependencies.after(tx, inv_id)
            )
            gang = gangs.record(tx, inv_id) if row is not None and row["nodes"] > 1 else None
        if row is None:
            raise NotFound(f"unknown invocation '{inv_id}'")
        inv = invocation_of(row)
        if gang is not None:
            inv = replace(inv, gang=gang)
        return inv if after is None else replace(inv, after=after)

    def count(self, ns: str, queue: str, state: str = "queued") -> int:
        check_state(state)
        with self.connector.transaction(write=False) as tx:
            row = tx.one("count_state", ns=ns, queue=queue, state=state)
        return int(row["n"]) if row else 0

    def cancel(self, ns: str, inv_id: str, *, kill: bool = False) -> bool:
        """Cancel a queued invocation; with kill, also ask the worker to end a running one."""
        now = time.time()
        killed = None
        with self.connector.transaction() as tx:
            cancelled = tx.one("cancel_queued", id=inv_id, ns=ns, now=now) is not None
            if not cancelled and kill:
                killed = tx.one("request_kill", id=inv_id, ns=ns)
            if (
                not cancelled
                and killed is None
                and tx.one("get_invocation", id=inv_id, ns=ns) is None
            ):
                raise NotFound(f"unknown invocation '{inv_id}'")
        if cancelled:
            self.waker.notify()
        elif killed is not None:  # nothing ends yet: only the worker's channel wants to know
            self.waker.notify(work=[kill_key(ns, str(killed["worker"]))], reads=False)
        return cancelled or killed is not None

    def invocations(
        self,
        ns: str,
        *,
        queue: str | None = None,
        state: str | None = None,
        limit: int = 50,
        before: str | None = None,
        map_id: str | None = None,
    ) -> list[Invocation]:
        """Newest first, filtered; rows carry no result bytes (read one by id for its result).

        `before` pages: pass the last id of a page to get the next, older one. Each filter
        combination has its own statement and index (queries.sql, list_invocations), so a page
        costs the same at any depth. `map_id`: one map's jobs (sdk/mapping.py), alone or with
        `before`; a map is one queue's, and its states are for `status` to count.
        """
        if queue is not None:
            check_name(queue)
        if state is not None:
            check_state(state)
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise InvalidArgument(f"limit must be between 1 and {MAX_LIST_LIMIT}, got {limit}")
        if before is not None and not (before.isascii() and before.isalnum() and len(before) <= 64):
            raise InvalidArgument(f"before must be an invocation id, got {before!r}")
        if map_id is not None:
            check_map_id(map_id)
            if queue is not None or state is not None:
                raise InvalidArgument(
                    "a map's listing takes no queue or state filter: list it by map alone "
                    "(and page with before)"
                )
        params = {
            "ns": ns,
            "queue": queue,
            "state": state,
            "before": before,
            "limit": limit,
            "map_id": map_id,
        }
        params = {k: v for k, v in params.items() if v is not None}
        with self.connector.transaction(write=False) as tx:
            rows = tx.all(listing_statement(queue, state, before, map_id), **params)
        return [invocation_of(r) for r in rows]

    def retry(self, ns: str, inv_id: str) -> Invocation:
        """Requeue a failed / killed / timeout invocation as one more attempt, same id.

        An operator's retry is an explicit decision, so it is not held to the queue's admission
        (max_depth, rate_limit); the queue must still accept work (active). The journal is
        cleared, since the failed attempt closed it with an ERROR frame; the row keeps the last
        error until the new attempt settles.
        """
        now = time.time()
        with self.connector.transaction() as tx:
            row = tx.one("get_invocation", id=inv_id, ns=ns)
            if row is None:
                raise NotFound(f"unknown invocation '{inv_id}'")
            if row["state"] not in ("failed", "killed", "timeout"):
                hint = {
                    "queued": "it has not run yet",
                    "running": "it is running",
                    "succeeded": "it succeeded",
                    "cancelled": "it was cancelled before it ran: submit it again instead",
                }.get(row["state"], "")
                raise Conflict(
                    f"cannot retry invocation '{inv_id}': it is {row['state']}"
                    + (f" ({hint})" if hint else "")
                    + "; only failed, killed or timeout invocations can be retried"
                )
            queue_row = tx.one("get_queue", ns=ns, name=row["queue"])
            info = self._queue_for_submit(tx, ns, row["queue"], now, queue_row)
            done = tx.one("retry_terminal", id=inv_id, ns=ns, deadline_at=deadline_for(info, now))
            if done is None:  # settled differently between the read and the write
                raise Conflict(f"cannot retry invocation '{inv_id}': its state just changed")
            tx.all("retry_clear_frames", channel=inv_id)
            row = tx.one("get_invocation", id=inv_id, ns=ns)
        self.waker.notify()
        assert row is not None
        return invocation_of(row)


def listing_statement(
    queue: str | None, state: str | None, before: str | None, map_id: str | None = None
) -> str:
    """The list_invocations statement for these filters: one per combination, so that each
    seeks on its own index instead of testing optional filters row by row (queries.sql)."""
    return (
        "list_invocations"
        + ("_map" if map_id is not None else "")
        + ("_queue" if queue is not None else "")
        + ("_state" if state is not None else "")
        + ("_before" if before is not None else "")
    )
