"""Dependencies: a job submitted with `after=[id, ...]` waits as `waiting` until its parents end.

Issue 36, item 4. The peers' users fight dependents that are never enqueued, chords stuck after
one failed member, and joins that run twice (rq#2074, rq#2006, celery#2725). Here every part of
it is a row and a transaction:

- at submit (`plan`, `link`): each parent must exist in the namespace, or come earlier in the
  same batch. So a parent always exists before its child, and no cycle can be made: a job
  cannot name a parent that does not exist yet. The parents outside the batch are locked and
  read in the submit's transaction (`lock_parents`), so a parent ending at the same moment is
  either seen ended here or finds the new edge when it settles. A parent that already failed
  ends the child `cancelled` at once (unless `after_failure="run"`);
- when a parent ends, the trigger of migration 26 settles its waiting children in the same
  transaction, whichever statement ended it: the last parent to end releases the child
  (`queued`, or `scheduled` while its own delay runs) under the child's row lock, so a join of
  thousands of parents settling at once releases it exactly once; a parent that did not succeed
  cancels it, naming the parent, and that cancellation runs down its own waiting dependents;
- the sweep's safety net (`sweep`): a waiting job none of whose parents is live any more (a row
  deleted under it) is settled as the trigger would have, a batch per sweep;
- a claim of a job whose arguments name a parent's result (`dls.output`) carries those results
  (`with_inputs`): the worker substitutes them, and no result goes through the producer.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from dreamlake.lakeshore.errors import InvalidArgument, NotFound
from dreamlake.lakeshore.types import LIVE_STATES, SubmitRequest

from .connector import Row, Transaction

#: The most parents one job may name (a join over more is a map's reduce).
MAX_PARENTS = 10_000
#: What a parent's failure does to a dependent.
AFTER_FAILURE = ("cancel", "run")
#: Waiting jobs the safety net looks at per sweep, at most.
SWEEP_BATCH = 500


def check_after(after: object, after_failure: object, inputs: object) -> None:
    """A submit's `after` (ids), `after_failure` and `inputs` (a subset of `after`)."""
    if not isinstance(after, (list, tuple)) or not all(isinstance(p, str) for p in after):
        raise InvalidArgument(f"after must be a list of invocation ids, got {after!r:.200}")
    if len(after) > MAX_PARENTS:
        raise InvalidArgument(f"after names {len(after)} parents; at most {MAX_PARENTS}")
    for parent in after:
        if not (0 < len(parent) <= 64 and parent.isascii() and parent.isalnum()):
            raise InvalidArgument(f"after holds {parent!r:.80}, which is not an invocation id")
    if after_failure not in AFTER_FAILURE:
        raise InvalidArgument(
            f"after_failure must be one of {'|'.join(AFTER_FAILURE)}, got {after_failure!r:.80}"
        )
    if not isinstance(inputs, (list, tuple)) or not set(inputs) <= set(after):
        raise InvalidArgument(
            "inputs must be ids the job also waits for (in after): the parents whose results "
            "its arguments take"
        )


@dataclass(frozen=True)
class Waiting:
    """How one request of a batch starts, given its parents as they stand at submit."""

    parents: tuple[str, ...]
    #: Parents not ended yet: the join counter's start.
    open: int
    #: 'waiting', 'cancelled' (a parent already failed), or None: as a job without parents.
    state: str | None
    error: str | None = None


def plan(
    tx: Transaction, ns: str, requests: Sequence[SubmitRequest], now: float
) -> dict[int, Waiting]:
    """For each request of the batch with parents (by index), how it starts; refuses an unknown
    parent or one later in the batch before anything is written."""
    if not any(req.after for req in requests):
        return {}
    batch = {req.id: i for i, req in enumerate(requests) if req.id is not None}
    outside = sorted({p for req in requests for p in req.after if p not in batch})
    states: dict[str, str] = {}
    if outside:
        states = {r["id"]: r["state"] for r in tx.all("lock_parents", ns=ns, ids=outside)}
        for parent in outside:
            if parent not in states:
                raise NotFound(
                    f"unknown parent invocation '{parent}': after names invocations of this "
                    "namespace that exist (submitted before, or earlier in the same batch)"
                )
    out: dict[int, Waiting] = {}
    for i, req in enumerate(requests):
        if not req.after:
            continue
        parents = tuple(dict.fromkeys(req.after))
        for parent in parents:
            j = batch.get(parent)
            if j is not None and j >= i:
                raise InvalidArgument(
                    f"request {i} waits on '{parent}', "
                    + ("itself" if j == i else f"request {j} of the same batch")
                    + ": a parent must be submitted before its child (earlier in the batch), "
                    "which is also why no cycle can be made"
                )
            if j is not None:
                started = out.get(j)
                states[parent] = started.state if started and started.state else "queued"
        out[i] = _start(req, parents, states)
    return out


def _start(req: SubmitRequest, parents: tuple[str, ...], states: dict[str, str]) -> Waiting:
    failed = next(
        (p for p in parents if states[p] not in LIVE_STATES and states[p] != "succeeded"), None
    )
    if failed is not None and req.after_failure == "cancel":
        return Waiting(parents, 0, "cancelled", cancel_words(failed, states[failed]))
    live = sum(1 for p in parents if states[p] in LIVE_STATES)
    return Waiting(parents, live, "waiting" if live else None)


def cancel_words(parent: str, state: str) -> str:
    """A cancelled dependent's error: the parent's id and how it ended (the trigger of
    migration 26 writes the same words)."""
    return f"parent {parent} ended {state}, so this dependent did not run (after_failure=cancel)"


def row_fields(req: SubmitRequest, waiting: Waiting | None, now: float) -> dict[str, Any]:
    """The insert's dependency columns for one request."""
    if waiting is None:
        return {
            "open_parents": None,
            "after_failure": None,
            "inputs": None,
            "error": None,
            "finished_at": None,
        }
    return {
        "open_parents": waiting.open,
        "after_failure": "run" if req.after_failure == "run" else None,
        "inputs": json.dumps(list(dict.fromkeys(req.inputs))) if req.inputs else None,
        "error": waiting.error,
        "finished_at": now if waiting.state == "cancelled" else None,
    }


def link(
    tx: Transaction,
    ns: str,
    planned: dict[int, Waiting],
    requests: Sequence[SubmitRequest],
    ids: Sequence[str],
    inserted: Collection[int],
    now: float,
) -> None:
    """After the batch's inserts: the edges of each child it made, and its parents from the
    same batch marked as having dependents. A parent of the batch whose key named an older job
    (an idempotent resubmit) was planned as new: its child is checked again against it."""
    if not planned:
        return
    batch = {req.id: i for i, req in enumerate(requests) if req.id is not None}
    for i, waiting in planned.items():
        if i not in inserted:
            continue  # the key named an existing job: its edges were made with it
        resolved = [ids[batch[p]] if p in batch else p for p in waiting.parents]
        own = [ids[batch[p]] for p in waiting.parents if p in batch]
        if own:
            tx.all("mark_parents", ns=ns, ids=own)
        tx.all("insert_dependencies", ns=ns, child=ids[i], parents=resolved)
        if any(p in batch and batch[p] not in inserted for p in waiting.parents):
            recheck(tx, ids[i], now)


def recheck(tx: Transaction, child: str, now: float) -> bool:
    """Settle a waiting `child` against its parents as they stand: cancelled when one did not
    succeed (unless after_failure is 'run'), released when none is live, else its counter
    recounted. Whether it left `waiting`."""
    parents = tx.all("parents_of", child=child)
    live = sum(1 for p in parents if p["state"] in LIVE_STATES)
    failed = next(
        (p for p in parents if p["state"] not in LIVE_STATES and p["state"] != "succeeded"), None
    )
    words = cancel_words(failed["id"], failed["state"] or "gone") if failed else ""
    if failed is not None and tx.one("cancel_waiting", id=child, error=words, now=now):
        tx.all("end_dependencies", child=child)
        return True
    if live:
        tx.all("recount_parents", id=child, n=live)
        return False
    moved = tx.one("settle_waiting", id=child, failed=int(failed is not None), error=words, now=now)
    tx.all("end_dependencies", child=child)
    return moved is not None


def sweep(tx: Transaction, now: float, after: str) -> tuple[int, str]:
    """The safety net, a batch from id `after`: (jobs settled, where the next batch starts;
    "" once it reached the end)."""
    rows = tx.all("waiting_unblocked", after=after, limit=SWEEP_BATCH)
    moved = sum(1 for r in rows if recheck(tx, r["id"], now))
    return moved, (rows[-1]["id"] if len(rows) == SWEEP_BATCH else "")


def with_inputs(tx: Transaction, rows: list[Row]) -> list[Row]:
    """Claimed rows, each whose arguments take parents' results (`inputs`) with those results
    read in the claim's transaction (`input_results`), for `claim_of`."""
    wanting = [r for r in rows if r.get("inputs")]
    if not wanting:
        return rows
    asked = {r["id"]: json.loads(r["inputs"]) for r in wanting}
    found = tx.all("parent_results", ids=sorted({p for ps in asked.values() for p in ps}))
    results = {r["id"]: None if r["result"] is None else bytes(r["result"]) for r in found}
    return [
        {**r, "input_results": {p: results[p] for p in asked[r["id"]] if p in results}}
        if r["id"] in asked
        else r
        for r in rows
    ]


def released_work(tx: Transaction, parents: Sequence[str]) -> list[tuple[str, str]]:
    """(namespace, queue) of each queue where dependents of `parents` are claimable now that
    these settled (in the settling transaction: the trigger's changes are visible)."""
    if not parents:
        return []
    return [(r["namespace"], r["queue"]) for r in tx.all("released_queues", ids=list(parents))]


def after(tx: Transaction, child: str) -> list[str]:
    """A child's parents' ids (`Invocation.after`, which `jobs show` lists)."""
    return [r["id"] for r in tx.all("parents_of", child=child)]
