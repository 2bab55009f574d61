"""Invocations: submit (which may create its queue), read, cancel, claim, settle, list."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import msgpack

from dreamlake.lakeshore import signing
from dreamlake.lakeshore.errors import Conflict, DispatchError, InvalidArgument, LeaseLost, NotFound
from dreamlake.lakeshore.plane import dependencies, locality
from dreamlake.lakeshore.plane.admission import admit, deadline_for
from dreamlake.lakeshore.plane.connector import Row, Transaction
from dreamlake.lakeshore.plane.wakeup import work_key
from dreamlake.lakeshore.types import (
    END_STATE_CAUSES,
    Ack,
    Claim,
    ClaimArgs,
    Invocation,
    QueueInfo,
    SubmitRequest,
    check_name,
    check_state,
    storable_text,
)

from . import schedulable
from .base import (
    MAX_BATCH,
    RETRY_BASE_S,
    RETRY_CAP_S,
    new_id,
)
from .claims import Claimed, ClaimStore
from .placement import asked, write_request
from .preemption import check_outcome, set_preemption_limit
from .records import (
    check_map_id,
    check_submit,
    claim_of,
    due_time,
    invocation_of,
    owned_objects,
    queue_info_of,
)

#: Told, after an ack's commit and before anyone is woken, the invocations it ended by id.
OnEnded = Callable[[Mapping[str, Invocation]], None]


class InvocationStore(ClaimStore):
    """Invocations: submit (which may create its queue), read, cancel, claim, settle, list."""

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
        if row is None:
            raise NotFound(f"unknown invocation '{inv_id}'")
        inv = invocation_of(row)
        return inv if after is None else replace(inv, after=after)

    def count(self, ns: str, queue: str, state: str = "queued") -> int:
        check_state(state)
        with self.connector.transaction(write=False) as tx:
            row = tx.one("count_state", ns=ns, queue=queue, state=state)
        return int(row["n"]) if row else 0

    def cancel(self, ns: str, inv_id: str, *, kill: bool = False) -> bool:
        """Cancel a queued invocation; with kill, also ask the worker to end a running one."""
        now = time.time()
        with self.connector.transaction() as tx:
            if tx.one("cancel_queued", id=inv_id, ns=ns, now=now) or (
                kill and tx.one("request_kill", id=inv_id, ns=ns)
            ):
                done = True
            elif tx.one("get_invocation", id=inv_id, ns=ns) is None:
                raise NotFound(f"unknown invocation '{inv_id}'")
            else:
                done = False
        if done:
            self.waker.notify()
        return done

    def ack_and_claim(
        self,
        ns: str,
        acks: Sequence[Ack],
        args: ClaimArgs,
        *,
        on_ended: OnEnded | None = None,
    ) -> tuple[list[DispatchError | None], list[Claim]]:
        """Settle `acks` as succeeded and claim as `claim_many` does, in one transaction:
        the worker that just finished a job takes its next one with the commit that records the
        result. Per ack, the refusal or None, as `ack_many` answers; a refused ack refuses only
        itself, and the claim still runs. `on_ended` as `ack_many` takes it."""
        if len(acks) > MAX_BATCH:
            raise InvalidArgument(f"at most {MAX_BATCH} acks in one call, not {len(acks)}")
        claiming = self._claiming(ns, args)
        ended: dict[str, Invocation] | None = {} if on_ended is not None and ns else None
        with self.connector.transaction() as tx:
            # Claim, then settle: the counter rows (and, on Postgres, their locks) are then
            # taken queued, running, ended, the order every other transaction takes them in;
            # the other way round deadlocked against a plain claim.
            claimed = self._claim_in(tx, claiming, args.kind, args.temperature, args.limit)
            released: list[str] = []
            errors = self._ack_in(tx, acks, ns, claiming["now"], ended, released)
        work = self._released_work(released)
        if on_ended is not None and ended:
            on_ended(ended)
        if work:  # dependents are claimable now on these queues
            self.waker.notify(work=[work_key(n, q) for n, q in work], reads=False)
        self._claimed(claimed, acked=_settled(acks, errors))
        return errors, [claim_of(row) for row in claimed.rows]

    def sweep(self) -> int:
        """End or requeue every attempt whose lease ran out; returns how many moved. At most
        every few seconds, also name the queued jobs no live daemon could run (schedulable.py)."""
        now = time.time()
        with self.connector.transaction() as tx:
            moved = self._sweep(tx, now)
            if schedulable.due(self._judged_at, now):
                self._judged_at = now
                moved += schedulable.sweep(tx, now, self._append_error)
                settled, self._waiting_from = dependencies.sweep(tx, now, self._waiting_from)
                moved += settled
        if moved:
            self.waker.notify()
        return moved

    def _append_error(self, tx: Transaction, inv_id: str, error: str, now: float) -> None:
        self._append(tx, inv_id, "ERROR", msgpack.packb(error), now)

    def ack(
        self,
        inv_id: str,
        lease: str,
        result: bytes | None,
        *,
        ns: str | None = None,
        on_ended: OnEnded | None = None,
    ) -> None:
        (error,) = self.ack_many([Ack(inv_id, lease, result)], ns=ns, on_ended=on_ended)
        if error is not None:
            raise error

    def ack_many(
        self,
        acks: Sequence[Ack],
        *,
        ns: str | None = None,
        on_ended: OnEnded | None = None,
    ) -> list[DispatchError | None]:
        """Settle many attempts as succeeded in one transaction; an error (or None) per ack.

        One refused ack (its lease lost, say) refuses only itself: the others still commit.
        With `ns`, an id of another namespace is refused as unknown, as the single ack route
        refuses it; and `on_ended`, if given, receives the invocations these acks ended, as
        they stand after the commit, before anyone is woken (the server hands them to the
        submit-and-waits it holds for them: `server/handoff.py`).
        """
        if len(acks) > MAX_BATCH:
            raise InvalidArgument(f"at most {MAX_BATCH} acks in one call, not {len(acks)}")
        ended: dict[str, Invocation] | None = {} if on_ended is not None and ns else None
        released: list[str] = []
        with self.connector.transaction() as tx:
            out = self._ack_in(tx, acks, ns, time.time(), ended, released)
        work = self._released_work(released)
        if on_ended is not None and ended:
            on_ended(ended)
        settled = _settled(acks, out)
        if settled or work:  # only these invocations' readers, and claims where work came
            self.waker.notify(work=[work_key(n, q) for n, q in work], reads=False, ended=settled)
        return out

    def _ack_in(
        self,
        tx: Transaction,
        acks: Sequence[Ack],
        ns: str | None,
        now: float,
        ended: dict[str, Invocation] | None = None,
        released: list[str] | None = None,
    ) -> list[DispatchError | None]:
        """Settle each ack; into `ended` (with `ns`), each invocation an ack ended, as the
        settle's own statement returns it with the result the ack carried: no read after. Into
        `released`, each one jobs wait on: its settle may have made them claimable."""
        out: list[DispatchError | None] = []
        for a in acks:
            # No END frame: a reader that finds no more frames and a succeeded row has
            # reached the end, which saves a write on every job that never streamed.
            settled = (
                tx.one("settle_success", id=a.id, lease=a.lease, result=a.result, now=now)
                if ns is None
                else tx.one(
                    "settle_success_in", id=a.id, ns=ns, lease=a.lease, result=a.result, now=now
                )
            )
            if settled:
                if ended is not None:
                    ended[a.id] = invocation_of({**settled, "result": a.result})
                if settled["dependents"] is not None and released is not None:
                    released.append(a.id)
                out.append(None)
                continue
            if ns is not None and tx.one("get_invocation", id=a.id, ns=ns) is None:
                out.append(NotFound(f"unknown invocation '{a.id}'"))  # or another namespace's
                continue
            try:
                self._refuse_settle(tx, a.id, a.lease, "succeeded", "ack", result=a.result)
                out.append(None)
            except DispatchError as exc:
                out.append(exc)
        return out

    def _released_work(self, parents: Sequence[str]) -> list[tuple[str, str]]:
        """Where the settles of `parents` (jobs others wait on) made dependents claimable:
        read after the commit, outside it, so a join's parents hold their child's row lock no
        longer than their commit (a concurrent reader may find the same: one more wake-up)."""
        if not parents:
            return []
        with self.connector.transaction(write=False) as tx:
            return dependencies.released_work(tx, parents)

    def nack(self, inv_id: str, lease: str, *, error: str, retry: bool = True) -> str:
        """Fail this attempt; requeue with backoff while attempts remain. Returns the new state."""
        error = storable_text(error)
        now = time.time()
        with self.connector.transaction() as tx:
            held = tx.one("lease_of", id=inv_id)
            if held is None:
                raise NotFound(f"unknown invocation '{inv_id}'")
            state = "failed"
            if retry:
                delay = min(RETRY_CAP_S, RETRY_BASE_S * 2 ** max(0, held["attempt"] - 1))
                retried = tx.one(
                    "settle_retry",
                    id=inv_id,
                    lease=lease,
                    error=error,
                    now=now,
                    not_before=now + delay,
                )
                state = "queued" if retried else "failed"
            if state == "failed":
                if tx.one(
                    "settle_terminal",
                    id=inv_id,
                    lease=lease,
                    state="failed",
                    error=error,
                    now=now,
                    cause="error",
                ):
                    self._append(tx, inv_id, "ERROR", msgpack.packb(error), now)
                else:
                    self._refuse_settle(tx, inv_id, lease, "failed", "nack")
                    return "failed"
        self.waker.notify()  # after the commit, so a woken reader sees the new state
        return state

    def end(
        self, inv_id: str, lease: str, *, state: str, error: str, cause: str | None = None
    ) -> None:
        """End an attempt as killed, timeout or failed (the daemon terminated it, or its process
        died); `cause` is why, as the daemon decided it (END_STATE_CAUSES; None: the state's
        usual one), so an out-of-memory kill is told apart from any other death."""
        cause = check_end_cause(state, cause)
        error = storable_text(error)
        now = time.time()
        with self.connector.transaction() as tx:
            if tx.one(
                "settle_terminal",
                id=inv_id,
                lease=lease,
                state=state,
                error=error,
                now=now,
                cause=cause,
            ):
                self._append(tx, inv_id, "ERROR", msgpack.packb(error), now)
            else:
                self._refuse_settle(tx, inv_id, lease, state, "end")
                return
        self.waker.notify()

    def release(
        self, inv_id: str, lease: str, *, outcome: str = "unrun", cause: str = "notice"
    ) -> bool:
        """Give a claimed job back: `unrun` (a draining daemon) without spending an attempt;
        `preempted` (its box is going away) as a preemption (preemption.py), for `cause`."""
        if check_outcome(outcome) == "preempted":
            return self._release_preempted(inv_id, lease, cause)
        with self.connector.transaction() as tx:
            done = tx.one("release", id=inv_id, lease=lease) is not None
        if done:
            self.waker.notify()
        return done

    def _refuse_settle(
        self,
        tx: Transaction,
        inv_id: str,
        lease: str,
        state: str,
        verb: str,
        *,
        result: bytes | None = None,
    ) -> None:
        """A settle that matched nothing: a repeat of one that landed is fine, else refuse.

        A repeat is the same settle: an ack again with the same lease and the same result (its
        first answer was lost). The same lease with another result is refused: the first one
        stands, and the worker that sent the second must not believe its result was stored.
        """
        row = tx.one("lease_of", id=inv_id)
        if row is None:
            raise NotFound(f"unknown invocation '{inv_id}'")
        if row["lease"] == lease and row["state"] == state:
            if verb == "ack":
                stored = tx.one("settled_result", id=inv_id)
                if stored is not None and _blob(stored["result"]) != _blob(result):
                    raise Conflict(
                        f"ack refused: invocation '{inv_id}' already succeeded with another "
                        "result under this lease; a repeated ack must carry the same result"
                    )
            return  # the same settle again (its first response was lost): idempotent
        if row["lease"] is None:  # the sweep took it back: requeue clears the lease
            raise LeaseLost(
                f"{verb} refused: the lease on invocation '{inv_id}' expired and the job was "
                f"requeued for another attempt (state {row['state']})"
            )
        if row["lease"] != lease:
            raise LeaseLost(
                f"{verb} refused: invocation '{inv_id}' is no longer held by this worker "
                f"(its lease expired and it was re-dispatched; state {row['state']})"
            )
        raise LeaseLost(
            f"{verb} refused: invocation '{inv_id}' is {row['state']}"
            + (" and its lease has expired" if row["state"] == "running" else "")
        )

    def renew(self, leases: Sequence[str], lease_s: float) -> dict[str, bool]:
        """Extend live leases; returns {invocation id: kill requested} for those still held."""
        if not leases:
            return {}
        now = time.time()
        with self.connector.transaction() as tx:
            rows = tx.all("renew_leases", leases=list(leases), expires=now + lease_s, now=now)
        return {r["id"]: bool(r["kill_requested"]) for r in rows}

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
        if not 1 <= limit <= 1000:
            raise InvalidArgument(f"limit must be between 1 and 1000, got {limit}")
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


#: The cause an `end` records (issue 35): the daemon ends an attempt for these reasons only.
def check_end_cause(state: str, cause: str | None) -> str:
    """The cause `end` records for `state`: the one given, if the state allows it."""
    causes = END_STATE_CAUSES.get(state)
    if causes is None:
        raise InvalidArgument(f"cannot end an attempt as '{state}'; use killed|timeout|failed")
    if cause is None:
        return causes[0]
    if cause not in causes:
        raise InvalidArgument(
            f"cannot end an attempt as '{state}' with cause {cause!r}; use {'|'.join(causes)}"
        )
    return cause


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


def _blob(value: bytes | memoryview | None) -> bytes | None:
    """Stored bytes as bytes (Postgres hands back memoryview), for comparison."""
    return None if value is None else bytes(value)


def _settled(acks: Sequence[Ack], errors: Sequence[DispatchError | None]) -> list[str]:
    """The ids of the acks that were not refused: a refused ack changed nothing, so waking its
    invocation's readers would only have them read the row they already hold again."""
    return [a.id for a, error in zip(acks, errors, strict=True) if error is None]
