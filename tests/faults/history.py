"""A history of what clients saw, and a checker that reads it against the store after a drain.

The shape is Jepsen's queue checker: every operation is recorded from the client's side with
what came back (an id, a claim, a settle accepted / refused / unknown because the answer was
lost), then the queue is drained and the final rows are read. The checks:

- lost:          a submit that returned an id whose row is missing or not terminal;
- split keys:    one idempotency key that returned two different ids;
- unexpected:    more rows in the queue than distinct keys ever submitted;
- double lease:  an attempt granted while an earlier attempt of the same job still held an
                 unexpired lease (that lease ended neither by expiry nor by a settle);
- stale settle:  a terminal settle accepted for an attempt that did not win (two attempts
                 settled, or one that is not the row's final attempt);
- refused retry: the same settle resent after a lost answer, refused although it had landed;
- wrong result:  the row's result is not the one the winning attempt sent.

Times: a claim's grant time is exact (the server's `now`, read back as expires - lease_s); a
renewal's new expiry is bounded below by send time + lease_s; a lease ended by a settle ended
no later than the settle was answered, and no earlier than it was sent. Every bound is taken on
the side that cannot raise a false alarm.

Identity of an attempt: its lease when the client saw it (custom loops), else worker#attempt
(real daemons, read from their JSON logs), as id/worker#attempt.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from dreamlake.lakeshore.types import Claim, Invocation


@dataclass
class Attempt:
    id: str
    worker: str
    attempt: int
    ident: str
    granted_at: float | None = None
    expires_lower: float | None = None
    ended_by_settle_at: float | None = None  # send time of an accepted settle (lower bound)


@dataclass
class Settle:
    id: str
    ident: str
    attempt: int
    verb: str
    outcome: str  # accepted | refused | unknown
    sent_at: float
    tag: Any = None  # what this attempt would have stored as the result


@dataclass
class History:
    """Thread-safe record of one run; `check(rows)` returns the anomalies (empty: all good)."""

    seed: int
    submits: list[tuple[str, str | None]] = field(default_factory=list)  # (key, id or None)
    attempts: dict[str, Attempt] = field(default_factory=dict)
    settles: list[Settle] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # -- recording ----------------------------------------------------------------------------

    def submit(self, key: str, inv_id: str | None) -> None:
        with self._lock:
            self.submits.append((key, inv_id))

    def claim(self, worker: str, claim: Claim, lease_s: float) -> Attempt:
        att = Attempt(
            id=claim.id,
            worker=worker,
            attempt=claim.attempt,
            ident=claim.lease,
            granted_at=claim.lease_expires_at - lease_s,
            expires_lower=claim.lease_expires_at,
        )
        with self._lock:
            self.attempts[att.ident] = att
        return att

    def claim_seen(self, worker: str, inv_id: str, attempt: int) -> Attempt:
        """A claim known only from a daemon's log: no lease, no window."""
        att = Attempt(
            id=inv_id, worker=worker, attempt=attempt, ident=f"{inv_id}/{worker}#{attempt}"
        )
        with self._lock:
            self.attempts[att.ident] = att
        return att

    def renewed(self, lease: str, sent_at: float, lease_s: float) -> None:
        with self._lock:
            att = self.attempts[lease]
            att.expires_lower = max(att.expires_lower or 0.0, sent_at + lease_s)

    def settle(
        self, att: Attempt, verb: str, outcome: str, sent_at: float, tag: Any = None
    ) -> None:
        with self._lock:
            self.settles.append(Settle(att.id, att.ident, att.attempt, verb, outcome, sent_at, tag))
            if outcome == "accepted" and att.ended_by_settle_at is None:
                att.ended_by_settle_at = sent_at

    # -- checking -----------------------------------------------------------------------------

    def ids(self) -> set[str]:
        return {i for _, i in self.submits if i is not None}

    def keys(self) -> set[str]:
        return {k for k, _ in self.submits}

    def stats(self) -> dict[str, int]:
        outcomes = Counter(s.outcome for s in self.settles)
        return {
            "submits": len(self.submits),
            "ids": len(self.ids()),
            "unknown_submits": sum(1 for _, i in self.submits if i is None),
            "attempts": len(self.attempts),
            "reattempts": len(self.attempts) - len({a.id for a in self.attempts.values()}),
            "settles_accepted": outcomes["accepted"],
            "settles_refused": outcomes["refused"],
            "settles_unknown": outcomes["unknown"],
        }

    def check(
        self,
        rows: dict[str, Invocation],
        *,
        rows_in_queue: int | None = None,
        result_tag: Callable[[Invocation], Any] | None = None,
    ) -> list[str]:
        """Anomalies of this history against the drained store (`rows` by id)."""
        anomalies: list[str] = []
        anomalies += self._check_submits(rows, rows_in_queue)
        anomalies += self._check_leases()
        anomalies += self._check_settles(rows, result_tag or (lambda inv: inv.result))
        return [f"[seed {self.seed}] {a}" for a in anomalies]

    def _check_submits(self, rows: dict[str, Invocation], rows_in_queue: int | None) -> list[str]:
        out = []
        by_key: dict[str, set[str]] = defaultdict(set)
        for key, inv_id in self.submits:
            if inv_id is not None:
                by_key[key].add(inv_id)
        for key, ids in by_key.items():
            if len(ids) > 1:
                out.append(f"split key: {key!r} returned ids {sorted(ids)}")
        for inv_id in sorted(self.ids()):
            row = rows.get(inv_id)
            if row is None:
                out.append(f"lost: submit returned {inv_id} but the store has no such row")
            elif not row.terminal:
                out.append(f"not terminal after the drain: {inv_id} is {row.state}")
        if rows_in_queue is not None and rows_in_queue > len(self.keys()):
            out.append(f"unexpected: {rows_in_queue} rows in the queue for {len(self.keys())} keys")
        return out

    def _check_leases(self) -> list[str]:
        out = []
        by_job: dict[str, list[Attempt]] = defaultdict(list)
        for att in self.attempts.values():
            if att.granted_at is not None:
                by_job[att.id].append(att)
        for inv_id, atts in by_job.items():
            atts.sort(key=lambda a: a.granted_at or 0.0)
            for earlier, later in pairwise(atts):
                live_until = earlier.expires_lower or 0.0
                if earlier.ended_by_settle_at is not None:
                    live_until = min(live_until, earlier.ended_by_settle_at)
                assert later.granted_at is not None
                if later.granted_at < live_until:
                    out.append(
                        f"double lease: {inv_id} attempt {later.attempt} ({later.worker}) granted "
                        f"{live_until - later.granted_at:.3f}s before attempt {earlier.attempt} "
                        f"({earlier.worker}) lost its lease"
                    )
        return out

    def _check_settles(
        self, rows: dict[str, Invocation], result_tag: Callable[[Invocation], Any]
    ) -> list[str]:
        out = []
        accepted: dict[str, dict[str, Settle]] = defaultdict(dict)
        for s in self.settles:
            if s.outcome == "accepted":
                accepted[s.id].setdefault(s.ident, s)
        for inv_id, winners in accepted.items():
            row = rows.get(inv_id)
            if len(winners) > 1:
                out.append(
                    f"stale settle: {inv_id} accepted terminal settles from attempts "
                    f"{sorted(w.attempt for w in winners.values())}"
                )
                continue
            (win,) = winners.values()
            if row is None:
                continue
            if win.attempt != row.attempt:
                out.append(
                    f"stale settle: {inv_id} accepted a settle of attempt {win.attempt} but the "
                    f"row ended on attempt {row.attempt}"
                )
            if win.verb == "ack" and row.state != "succeeded":
                out.append(f"lost ack: {inv_id} acked by attempt {win.attempt} but is {row.state}")
            if (
                win.verb == "ack"
                and row.state == "succeeded"
                and win.tag is not None
                and result_tag(row) != win.tag
            ):
                out.append(
                    f"wrong result: {inv_id} holds {result_tag(row)!r}, the winning "
                    f"attempt {win.attempt} sent {win.tag!r}"
                )
        for s in self.settles:
            win = accepted.get(s.id, {}).get(s.ident)
            if s.outcome == "refused" and win is not None and win.verb == s.verb:
                out.append(
                    f"refused retry: {s.id} {s.verb} of attempt {s.attempt} was refused after an "
                    "identical one landed (a resend after a lost answer must be idempotent)"
                )
        return out


def read_rows(fetch: Callable[[str], Invocation], ids: Iterable[str]) -> dict[str, Invocation]:
    """The final rows, by id; a missing id is simply absent (the checker calls it lost)."""
    from dreamlake.lakeshore.errors import NotFound

    rows = {}
    for inv_id in ids:
        try:
            rows[inv_id] = fetch(inv_id)
        except NotFound:
            continue
    return rows


def absorb_daemon_log(
    history: History, worker: str, pid: int, events: list[dict[str, Any]]
) -> None:
    """A real daemon's claims and settles, from its JSON log, into `history`.

    A settle the daemon logged as done (job.succeeded / failed / killed / timeout) was accepted;
    job.settle_refused was refused; the tag of an ack is the daemon's pid, which the fault jobs
    return as their parent pid, so `result_tag` can tell whose result a row holds.

    A settle goes to the attempt its line names: one daemon may hold two attempts of a job at
    once (a lease that ran out on one slot while another slot claimed the requeued job), so the
    attempt it last claimed is not necessarily the one settling.
    """
    done = {"job.succeeded": "ack", "job.failed": "fail", "job.killed": "end", "job.timeout": "end"}
    seen: dict[tuple[str, int], Attempt] = {}
    for e in events:
        kind = e.get("event")
        inv_id = e.get("invocation")
        attempt = e.get("attempt")
        if not isinstance(inv_id, str) or not isinstance(attempt, int):
            continue
        att = seen.get((inv_id, attempt))
        if kind == "job.claimed":
            seen[inv_id, attempt] = history.claim_seen(worker, inv_id, attempt)
        elif kind in done and att is not None:
            tag = pid if done[kind] == "ack" else None
            history.settle(att, done[kind], "accepted", time.time(), tag)
        elif kind == "job.settle_refused" and att is not None:
            history.settle(att, str(e.get("verb")), "refused", time.time())
