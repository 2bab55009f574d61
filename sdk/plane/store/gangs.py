"""Gangs (issue 47): a job of `nodes` > 1 is handed out as that many parts, one per worker,
and runs all at once or not at all.

A claim from a worker that can take the gang's per-node request gets a part: a `Claim` with
`gang = {rank, nodes, attempt}` under a lease of its own, *held* (its resources reserved,
nothing started). When the last of the N parts is held the attempt *starts*: the invocation
goes running under rank 0's lease, so that every failing settle of rank 0 is today's. Every
part's lease lives on its part row (`gang_parts`; any live part's renewal keeps the row's): a
settle under one that matches no row is looked up here and, for a part of the running attempt,
applied to the whole attempt under the row's lease (`row_lease`). So when any part ends the
attempt other than by success (nack, end, a preempted release, its lease running out), the row
leaves `running`, and every other part's lease is stale by today's fencing: their settles are
refused. A part's ack is recorded on its row; the last one ends the job, succeeded, with rank
0's result (`ack_part`), so a gang's attempt ends for all its parts at once either way.

How a claim gets a part, and why two gangs never deadlock, is gang_claims.py's; a gang the
workers cannot complete is let go after its queue's `admission.gang_wait_s` (`sweep`), and the
job waits again.

A daemon follows its gang with `GangStore.gang` (a read; the plane's `gang(..., wait_s=)` waits
on the waker for it to change), and says where it listens with `gang_ready`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import msgpack

from dreamlake.lakeshore.errors import (
    Conflict,
    DispatchError,
    InvalidArgument,
    LeaseLost,
    NotFound,
)
from dreamlake.lakeshore.plane.connector import Row, Transaction
from dreamlake.lakeshore.plane.wakeup import reader_key
from dreamlake.lakeshore.types import GangState, storable_text

from .base import StoreBase
from .records import check_addr, check_port

#: Part states in which a part holds its rank in its gang.
LIVE_PARTS = ("held", "started", "acked")

#: An ERROR frame writer (`SettleStore._append_error`): a gang ended for good says why.
AppendError = Callable[[Transaction, str, str, float], None]


def pending(tx: Transaction, inv_id: str, words: str, now: float) -> None:
    tx.all("gang_pending", id=inv_id, words=words, now=now)


def part_of(tx: Transaction, inv_id: str, lease: str) -> Row | None:
    """The part of `inv_id`'s gang that `lease` is, with its gang's state; None: none."""
    part = tx.one("gang_part", lease=lease)
    return part if part is not None and part["id"] == inv_id else None


def row_lease(tx: Transaction, inv_id: str, part: Row | None) -> str | None:
    """The invocation's own lease when `part` is a part of its running attempt: a settle
    under the part's lease is then the whole attempt's."""
    if part is None or part["state"] != "started" or part["gang_state"] != "started":
        return None
    held = tx.one("lease_of", id=inv_id)
    if held is None or held["state"] != "running" or held["lease"] is None:
        return None
    return str(held["lease"])


def stale(verb: str, inv_id: str, part: Row) -> LeaseLost:
    """The refusal of a settle under a part whose gang's attempt is over."""
    return LeaseLost(
        f"{verb} refused: part {part['rank']} of invocation '{inv_id}' belongs to gang attempt "
        f"{part['attempt']}, which is {part['gang_state']}"
        + (f" ({part['outcome']})" if part["outcome"] else "")
        + f"; this part is {part['state']}"
    )


def ack_part(
    tx: Transaction, inv_id: str, lease: str, result: bytes | None, now: float
) -> tuple[bool, DispatchError | None, Row | None]:
    """An ack under a gang's part's lease (handled, refusal, the row it ended): the part is
    recorded acked, and the last part's ack ends the job, succeeded, with rank 0's result; until
    then the job runs, so that a part failing after another's ack still fails the attempt as a
    whole. (False, None, None): no part under `lease` (today's refusal applies)."""
    part = part_of(tx, inv_id, lease)
    if part is None:
        return False, None, None
    if part["state"] == "acked":  # the same ack again (its answer was lost)
        if _blob(part["result"]) != _blob(result):
            return (
                True,
                Conflict(
                    f"ack refused: part {part['rank']} of invocation '{inv_id}' already acked with "
                    "another result; a repeated ack must carry the same result"
                ),
                None,
            )
        return True, None, None
    if part["state"] != "started" or part["gang_state"] != "started":
        return True, stale("ack", inv_id, part), None
    tx.all("gang_part_acked", lease=lease, result=result)
    tx.all("gang_bump", gang=part["gang"])
    live = [p for p in tx.all("gang_parts_of", gang=part["gang"]) if p["state"] in LIVE_PARTS]
    if any(p["state"] != "acked" for p in live):
        return True, None, None  # the others still run
    first = next(p for p in live if int(p["rank"]) == 0)
    held = tx.one("lease_of", id=inv_id)
    done = None
    if held is not None and held["lease"] is not None:
        done = tx.one(
            "settle_gang_success", id=inv_id, lease=held["lease"], result=first["result"], now=now
        )
    if done is None:
        return True, stale("ack", inv_id, part), None
    tx.all(
        "gang_end",
        gang=part["gang"],
        now=now,
        outcome="succeeded",
        rank=None,
        worker=None,
        why=None,
    )
    return True, None, {**done, "result": _blob(first["result"])}


def _blob(value: bytes | memoryview | None) -> bytes | None:
    """Stored bytes as bytes (Postgres hands back memoryview), for comparison."""
    return None if value is None else bytes(value)


def ended_by(
    tx: Transaction,
    inv_id: str,
    part: Row | None,
    why: str,
    now: float,
    *,
    first: str = "failed",
    outcome: str = "failed",
) -> None:
    """The attempt of `inv_id` ended other than by success, through `part` (None: through
    the row's lease, rank 0's): the gang ends, `part` recorded as what ended it first, every
    other live part stopped with it."""
    gang = tx.one("gang_live", id=inv_id)
    if gang is None:
        return
    if part is None:
        parts = tx.all("gang_parts_of", gang=gang["gang"])
        part = next((p for p in parts if int(p["rank"]) == 0 and p["state"] in LIVE_PARTS), None)
    tx.all(
        "gang_end",
        gang=gang["gang"],
        now=now,
        outcome=outcome,
        rank=None if part is None else int(part["rank"]),
        worker=None if part is None else part["worker"],
        why=storable_text(why)[:2000],
    )
    tx.all(
        "gang_parts_end",
        gang=gang["gang"],
        lease="" if part is None else part["lease"],
        first=first,
        rest="stopped",
    )


def let_go(tx: Transaction, part: Row, state: str, now: float) -> None:
    """One held part of a holding gang gives up (its worker released it, or its lease ran
    out): its rank is free for another worker; the gang keeps holding the rest."""
    tx.all("gang_part_set", lease=part["lease"], state=state)
    gang = tx.one("gang_of", gang=part["gang"])
    if gang is None or gang["state"] != "holding":
        return
    held = max(0, int(gang["held"]) - 1)
    tx.all("gang_set_held", gang=part["gang"], held=held)
    pending(
        tx, part["id"], f"gang: {held} of {gang['nodes']} parts held, waiting for the rest", now
    )


def sweep(tx: Transaction, now: float, append_error: AppendError) -> list[str]:
    """Let go of the holding gangs past their `gang_wait_s` (or whose job left the queue), and
    end the attempts of parts whose lease ran out: the ids of the jobs it changed."""
    changed: list[str] = []
    for gang in tx.all("gangs_past_wait", now=now):
        held, nodes = int(gang["held"]), int(gang["nodes"])
        queued = tx.one("gang_lock", id=gang["id"]) is not None
        why = (
            f"gang: {held} of {nodes} parts held within gang_wait_s; let go, waiting again"
            if queued
            else "gang: its job left the queue before every part was held"
        )
        tx.all(
            "gang_end",
            gang=gang["gang"],
            now=now,
            outcome="released" if queued else "cancelled",
            rank=None,
            worker=None,
            why=why,
        )
        tx.all("gang_parts_end", gang=gang["gang"], lease="", first="released", rest="released")
        if queued:
            pending(tx, gang["id"], why, now)
        changed.append(gang["id"])
    for part in tx.all("gang_parts_expired", now=now):
        row = part_of(tx, part["id"], part["lease"])
        if row is None or row["state"] not in ("held", "started"):
            continue
        if row["state"] == "held":
            let_go(tx, row, "lost", now)
        else:
            _lose_started(tx, row, now, append_error)
        changed.append(part["id"])
    return changed


def _lose_started(tx: Transaction, part: Row, now: float, append_error: AppendError) -> None:
    """A started part's lease ran out: as the sweep does for a job's lease (requeue_expired),
    the attempt is a preemption (not charged), or the job fails out of preemptions."""
    inv_id = part["id"]
    lease = row_lease(tx, inv_id, part)
    why = f"lease of part {part['rank']} (worker {part['worker']}) expired"
    if (
        lease is not None
        and tx.one("release_preempted", id=inv_id, lease=lease, cause="daemon_lost") is None
    ):
        row = tx.one("preemptions_of", id=inv_id)
        error = f"{why}: preempted past its max_preemptions" + (
            f" of {row['max_preemptions']}" if row else ""
        )
        if tx.one(
            "settle_terminal",
            id=inv_id,
            lease=lease,
            state="failed",
            error=error,
            now=now,
            cause="daemon_lost",
        ):
            tx.all("count_preemption", id=inv_id)
            append_error(tx, inv_id, error, now)
    ended_by(tx, inv_id, part, why, now, first="lost")


def first_failed(gang: Row) -> dict[str, Any] | None:
    """The part whose end ended a gang's attempt first: {rank, worker, why}; None if none."""
    if gang["failed_rank"] is None or gang["outcome"] == "succeeded":
        return None
    return {"rank": gang["failed_rank"], "worker": gang["failed_worker"], "why": gang["failed_why"]}


def record(tx: Transaction, inv_id: str) -> dict[str, Any] | None:
    """The job's newest gang attempt as a reader sees it (`Invocation.gang`): its parts, the
    newest holder of each rank, and the part that ended it first."""
    gang = tx.one("gang_last", id=inv_id)
    if gang is None:
        return None
    ranks: dict[int, Row] = {}
    for p in tx.all("gang_parts_of", gang=gang["gang"]):
        ranks[int(p["rank"])] = p
    return {
        "attempt": int(gang["attempt"]),
        "state": gang["state"],
        "outcome": gang["outcome"],
        "held": int(gang["held"]),
        "parts": [
            {"rank": r, "worker": p["worker"], "addr": p["addr"], "state": p["state"]}
            for r, p in sorted(ranks.items())
        ],
        "failed": first_failed(gang),
    }


#: What `GangStore._fence` answers for a held part it let go: the settle is done.
LET_GO = None


class GangStore(StoreBase):
    """The verbs of a gang's part: where its gang stands, and where the part listens."""

    def _fence(
        self, tx: Transaction, inv_id: str, lease: str, verb: str, now: float
    ) -> tuple[str, Row | None] | None:
        """For a settle whose statement matched nothing under `lease`: the lease to settle
        under and the part it is. A part of a running attempt settles the whole attempt
        under the row's lease; a held part (its gang not started) is let go alone, and None
        says the settle is done; a part of an attempt that is over is refused (`stale`).
        (`lease`, None): no part, today's refusal applies."""
        part = part_of(tx, inv_id, lease)
        if part is None:
            return lease, None
        if part["state"] == "held" and part["gang_state"] == "holding":
            let_go(tx, part, "released", now)
            return LET_GO
        row = row_lease(tx, inv_id, part)
        if row is None:
            raise stale(verb, inv_id, part)
        return row, part

    def gang(self, ns: str, inv_id: str, lease: str) -> GangState:
        """The gang attempt the part under `lease` belongs to, as it stands. A holding gang
        past its `gang_wait_s` is let go here, not only at the next sweep."""
        now = time.time()
        with self.connector.transaction(write=False) as tx:
            state = self._gang_read(tx, ns, inv_id, lease)
        if state.state == "holding" and now >= state.wait_until:
            with self.connector.transaction() as tx:
                changed = sweep(tx, now, self._append_error)
                state = self._gang_read(tx, ns, inv_id, lease)
            if changed:
                self.waker.notify()
        if state.state == "holding":  # the let-go is due then, with no commit to wake anyone
            self.waker.notify_at(state.wait_until, work=[reader_key(inv_id)])
        return state

    def gang_ready(
        self,
        ns: str,
        inv_id: str,
        lease: str,
        *,
        addr: str | None = None,
        port: int | None = None,
    ) -> GangState:
        """Record where the part under `lease` listens (its address, a port it found free:
        rank 0's is the gang's MASTER_PORT) while its attempt is live; refused once over."""
        check_addr(addr)
        check_port(port)
        with self.connector.transaction() as tx:
            state = self._gang_read(tx, ns, inv_id, lease)
            ready = tx.one("gang_ready", lease=lease, id=inv_id, addr=addr, port=port)
            if ready is None:
                part = part_of(tx, inv_id, lease)
                assert part is not None  # _gang_read found it
                raise stale("gang_ready", inv_id, part)
            tx.all("gang_bump", gang=ready["gang"])
            state = self._gang_read(tx, ns, inv_id, lease)
        self.waker.notify(work=(), reads=False, ended=[inv_id])
        return state

    def gang_notice(self, ns: str, inv_id: str, lease: str, *, until: float) -> GangState:
        """The box of the part under `lease` got a preemption notice; its grace ends at `until`
        (epoch seconds). Every other part is told (its `gang` wait wakes with `noticed`), so
        that each gets the grace to checkpoint rather than an abort when this part goes."""
        if isinstance(until, bool) or not isinstance(until, (int, float)) or until != until:
            raise InvalidArgument(f"until must be epoch seconds (a number), got {until!r}")
        now = time.time()
        with self.connector.transaction() as tx:
            state = self._gang_read(tx, ns, inv_id, lease)
            part = part_of(tx, inv_id, lease)
            assert part is not None  # _gang_read found it
            if part["state"] != "started" or part["gang_state"] != "started":
                raise stale("gang_notice", inv_id, part)
            tx.all("gang_notice", gang=part["gang"], rank=part["rank"], now=now, until=until)
            state = self._gang_read(tx, ns, inv_id, lease)
        self.waker.notify(work=(), reads=False, ended=[inv_id])
        return state

    def gang_progress(self, ns: str, inv_id: str, lease: str, *, hung: bool = False) -> GangState:
        """The child of the started part under `lease` moved: the gang's `progress_at` is now
        (a hang is no part moving for the job's hang_timeout_s, daemon/hangs.py). `hung`: its
        daemon found the gang hung instead; every part's `gang` wait wakes with `hung`."""
        if not isinstance(hung, bool):
            raise InvalidArgument(f"hung must be true or false, got {hung!r}")
        now = time.time()
        with self.connector.transaction() as tx:
            self._gang_read(tx, ns, inv_id, lease)
            part = part_of(tx, inv_id, lease)
            assert part is not None  # _gang_read found it
            if part["state"] != "started" or part["gang_state"] != "started":
                raise stale("gang_progress", inv_id, part)
            if hung:
                tx.all("gang_hung", gang=part["gang"], rank=part["rank"], now=now)
            else:
                tx.all("gang_progress", gang=part["gang"], now=now)
            state = self._gang_read(tx, ns, inv_id, lease)
        if hung:
            self.waker.notify(work=(), reads=False, ended=[inv_id])
        return state

    def _append_error(self, tx: Transaction, inv_id: str, error: str, now: float) -> None:
        self._append(tx, inv_id, "ERROR", msgpack.packb(error), now)

    def _gang_read(self, tx: Transaction, ns: str, inv_id: str, lease: str) -> GangState:
        if tx.one("get_invocation", id=inv_id, ns=ns) is None:
            raise NotFound(f"unknown invocation '{inv_id}'")
        part = part_of(tx, inv_id, lease)
        if part is None:
            raise NotFound(f"invocation '{inv_id}' has no gang part under this lease")
        view = tx.all("gang_view", gang=part["gang"])
        gang = view[0]  # the caller's own part is one of them
        ranks: dict[int, Row] = {}
        for p in view:
            ranks[int(p["rank"])] = p  # the newest holder of each rank
        failed = first_failed(gang)
        noticed = None
        if gang["noticed_rank"] is not None:
            noticed = {
                "rank": int(gang["noticed_rank"]),
                "at": float(gang["noticed_at"]),
                "until": float(gang["notice_until"]),
            }
        return GangState(
            id=inv_id,
            attempt=int(gang["attempt"]),
            nodes=int(gang["nodes"]),
            state=str(gang["gang_state"]),
            held=int(gang["held"]),
            rank=int(part["rank"]),
            parts=[
                {
                    "rank": rank,
                    "worker": p["worker"],
                    "addr": p["addr"],
                    "port": p["port"],
                    "state": p["state"],
                }
                for rank, p in sorted(ranks.items())
            ],
            wait_until=float(gang["wait_until"]),
            outcome=gang["outcome"],
            failed=failed,
            noticed=noticed,
            progress_at=None if gang["progress_at"] is None else float(gang["progress_at"]),
            hung=None
            if gang["hung_rank"] is None
            else {"rank": int(gang["hung_rank"]), "at": float(gang["hung_at"])},
            version=int(gang["version"]),
        )
