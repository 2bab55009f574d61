"""Delays: a job submitted with `delay_s` / `at` waits as `scheduled` until its due time.

The job is a row from the start, never held in a process's memory (issue 36, item 2: an ETA
task held by a worker is what the peers' users fight). Claims never take a scheduled row (they
take `queued` ones only); two things make it queued when its time comes:

- a claim on its queues: the statement that reads the claim's queue row also reads when the
  next scheduled job of those queues is due (`next_due`, one probe of a partial index of
  scheduled rows). Due already: the claim promotes the due ones first, in its own transaction,
  so they are claimed in queue order with everything else. Not yet: a claim that found nothing
  schedules a wake-up for then (`Waker.notify_at`), as it does for a locality window, so an
  idle worker waiting on the queue claims it within its own wake-up latency, not a poll's;
- the sweep (every claim's, every `SWEEP_EVERY_S`, and the server's and the embedded plane's
  timers), which promotes every namespace's due jobs, so nothing stays scheduled past due
  because no claim happened to look at its queue.

Promotions are bounded batches (`PROMOTE_BATCH`) so one transaction never rewrites a huge
backlog that fell due at once; the rest follows on the next claim or sweep.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .connector import Row, Transaction
from .wakeup import Waker, work_key

#: Scheduled jobs promoted per statement, at most.
PROMOTE_BATCH = 1000


def promote_if_due(tx: Transaction, params: dict[str, Any], window: Row) -> bool:
    """Promote the claim's queues' due jobs when `window` (its queue row read, or
    locality_next) says one is due; whether any was."""
    due = window["next_due"]
    if due is None or float(due) > params["now"]:
        return False
    rows = tx.all(
        "promote_due",
        ns=params["ns"],
        queues=params["queues"],
        now=params["now"],
        limit=PROMOTE_BATCH,
    )
    return bool(rows)


def promote_all_due(tx: Transaction, now: float) -> int:
    """The sweep's share: every namespace's due jobs (a batch); how many moved."""
    return len(tx.all("promote_due_all", now=now, limit=PROMOTE_BATCH))


def wake_when_due(
    waker: Waker, ns: str, queues: Sequence[str], due: float | None, now: float
) -> None:
    """After a claim found nothing: wake this process's claims on `queues` when their next
    scheduled job is due (None: none is scheduled)."""
    if due is not None and float(due) > now:
        waker.notify_at(float(due), work=[work_key(ns, q) for q in queues])
