"""Settling an attempt: ack, nack, end, release, renew its lease, and the sweep that ends
the attempts whose lease ran out.

Every call here is fenced by the attempt's lease: a worker whose lease expired (or a second
settle of the same attempt) is refused with the reason, and an ack that repeats the stored
result is answered as done. Kept apart from submit and read (invocations.py), which never hold
a lease, so the fencing rules sit in one module; `SqlStore` inherits both, as `InvocationStore`
is a `SettleStore` is a `ClaimStore`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

import msgpack

from dreamlake.lakeshore.errors import Conflict, DispatchError, InvalidArgument, LeaseLost, NotFound
from dreamlake.lakeshore.plane import dependencies
from dreamlake.lakeshore.plane.connector import Transaction
from dreamlake.lakeshore.plane.wakeup import work_key
from dreamlake.lakeshore.types import (
    END_STATE_CAUSES,
    Ack,
    Claim,
    ClaimArgs,
    Invocation,
    storable_text,
)

from . import gangs, schedulable
from .base import (
    MAX_BATCH,
    RETRY_BASE_S,
    RETRY_CAP_S,
)
from .claims import ClaimStore
from .preemption import check_outcome
from .records import (
    claim_of,
    invocation_of,
)

#: Told, after an ack's commit and before anyone is woken, the invocations it ended by id.
OnEnded = Callable[[Mapping[str, Invocation]], None]


class SettleStore(ClaimStore):
    """Settles (ack, nack, end, release), lease renewals and the expired-lease sweep."""

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
        moved = 0
        with self.connector.transaction(write=False) as tx:  # looked at first: see sweep_due
            due = tx.one("sweep_due", now=now)
        if due is not None and due["due"]:
            with self.connector.transaction() as tx:
                moved = self._sweep(tx, now)
        # Apart: the expired attempts it requeues stay locked until their commit, and on
        # PostgreSQL a claim meanwhile skips them; the judgement reads every queued request.
        if schedulable.due(self._judged_at, now):
            self._judged_at = now
            with self.connector.transaction() as tx:
                moved += schedulable.sweep(tx, now, self._append_error)
                settled, self._waiting_from = dependencies.sweep(tx, now, self._waiting_from)
                moved += settled
        if moved:
            self.waker.notify()
        return moved

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
            handled, refused, done = gangs.ack_part(tx, a.id, a.lease, a.result, now)
            if handled:  # a gang's part: recorded (the job's end, if it was the last), or refused
                if done is not None:
                    if ended is not None:
                        ended[a.id] = invocation_of(done)
                    if done["dependents"] is not None and released is not None:
                        released.append(a.id)
                out.append(refused)
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
        """Fail this attempt; requeue with backoff while attempts remain. Returns the new state.
        A gang's part fails its whole attempt (gangs.py); a held part only lets itself go."""
        error = storable_text(error)
        now = time.time()
        with self.connector.transaction() as tx:
            state = self._nack_in(tx, inv_id, lease, error, retry, now)
        self.waker.notify()  # after the commit, so a woken reader sees the new state
        return state

    def _nack_in(
        self, tx: Transaction, inv_id: str, lease: str, error: str, retry: bool, now: float
    ) -> str:
        held = tx.one("lease_of", id=inv_id)
        if held is None:
            raise NotFound(f"unknown invocation '{inv_id}'")
        part = None
        if held["nodes"] > 1 and held["lease"] != lease:  # a gang's part (gangs.py)
            fenced = self._fence(tx, inv_id, lease, "nack", now)
            if fenced is None:  # a held part let go: its gang holds on without it
                return "queued"
            lease, part = fenced
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
        if held["nodes"] > 1:
            gangs.ended_by(tx, inv_id, part, error or "nack", now)
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
            part = None
            done = tx.one(
                "settle_terminal",
                id=inv_id,
                lease=lease,
                state=state,
                error=error,
                now=now,
                cause=cause,
            )
            if done is None:  # a gang's part, perhaps (gangs.py): its end is the attempt's
                fenced = self._fence(tx, inv_id, lease, "end", now)
                if fenced is not None and fenced[1] is not None:
                    lease, part = fenced
                    done = tx.one(
                        "settle_terminal",
                        id=inv_id,
                        lease=lease,
                        state=state,
                        error=error,
                        now=now,
                        cause=cause,
                    )
                elif fenced is None:  # a held part let go
                    done = {"nodes": 1}
            if done is None:
                self._refuse_settle(tx, inv_id, lease, state, "end")
                return
            if done["nodes"] > 1:
                self._append(tx, inv_id, "ERROR", msgpack.packb(error), now)
                gangs.ended_by(tx, inv_id, part, f"{state} ({cause}): {error}", now)
            elif "id" in done:
                self._append(tx, inv_id, "ERROR", msgpack.packb(error), now)
        self.waker.notify()

    def release(
        self, inv_id: str, lease: str, *, outcome: str = "unrun", cause: str = "notice"
    ) -> bool:
        """Give a claimed job back: `unrun` (a draining daemon) without spending an attempt;
        `preempted` (its box is going away) as a preemption (preemption.py), for `cause`."""
        if check_outcome(outcome) == "preempted":
            return self._release_preempted(inv_id, lease, cause)
        now = time.time()
        with self.connector.transaction() as tx:
            row = tx.one("release", id=inv_id, lease=lease)
            part = None
            if row is None:  # a gang's part, perhaps (gangs.py)
                fenced = self._fence(tx, inv_id, lease, "release", now)
                if fenced is None:  # a held part let go: its gang holds on without it
                    row = {"nodes": 1}
                elif fenced[1] is not None:
                    lease, part = fenced
                    row = tx.one("release", id=inv_id, lease=lease)
            if row is not None and row["nodes"] > 1:
                gangs.ended_by(
                    tx, inv_id, part, "released unrun", now, first="released", outcome="released"
                )
        if row is not None:
            self.waker.notify()
        return row is not None

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
            held = {r["id"]: bool(r["kill_requested"]) for r in rows}
            if len(rows) < len(leases) or any(r["nodes"] > 1 for r in rows):
                # Gangs' parts (gangs.py), whose leases are theirs: rank 0's is the row's too.
                parts = tx.all("gang_renew", leases=list(leases), expires=now + lease_s, now=now)
                if parts:
                    ids = sorted({p["id"] for p in parts})
                    tx.all("gang_renew_rows", ids=ids, expires=now + lease_s, now=now)
                others = sorted({p["id"] for p in parts} - held.keys())
                if others:
                    kills = tx.all("kill_requested_of", ids=others)
                    held.update((r["id"], bool(r["kill_requested"])) for r in kills)
        return held


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


def _blob(value: bytes | memoryview | None) -> bytes | None:
    """Stored bytes as bytes (Postgres hands back memoryview), for comparison."""
    return None if value is None else bytes(value)


def _settled(acks: Sequence[Ack], errors: Sequence[DispatchError | None]) -> list[str]:
    """The ids of the acks that were not refused: a refused ack changed nothing, so waking its
    invocation's readers would only have them read the row they already hold again."""
    return [a.id for a, error in zip(acks, errors, strict=True) if error is None]
