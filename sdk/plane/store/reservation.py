"""No starvation (issue 34): a worker reserves for the head of its claim order.

A claim that only takes what fits what is free would pass a 4-GPU job by forever while 1-GPU
jobs keep coming, each one fitting the GPU the last one freed. So a fifo claim that sends
what its worker has in all (`free.box`) first reads the head among the jobs that worker could
ever run. If it fits what is free, that is the job. If not, the worker reserves for it: it
takes nothing that would delay it, only a job that fits and surely ends (by its timeout_s)
before the reservation could start, as the worker's running jobs' timeouts say
(`whole_free_at`). A head that needs GPUs held by jobs with no timeout has no such time:
then nothing is taken until it fits, which is what lets it start as soon as the GPUs are free.

The reservation is said where it is made, in the claim's transaction: the head is marked
`resources`, the jobs it holds back `reserved_for:<id>`, and they lose that mark when the
reserving worker takes the head. The pending sweep (schedulable.py) only catches up on what no
claim said. Every reservation rule lives here, for one-box jobs and gangs alike.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from typing import Any

from dreamlake.lakeshore.plane.connector import Row, Transaction
from dreamlake.lakeshore.resources import fit_params

from .schedulable import held_back

#: The most held-back jobs a new reservation names itself (`hold_back`): one statement in
#: the claim's transaction, bounded however deep the queue; the pending sweep names the rest.
HOLD_BACK_NAMED = 1000


def claim_reserving(
    tx: Transaction, params: Mapping[str, Any], box: Mapping[str, Any]
) -> Row | None:
    """The job a reserving worker takes now (the head, or a backfill), or None."""
    whole = {**params, **fit_params(box)}
    head = tx.one("queued_head_fit", **_unlocked(whole))
    if head is None:
        return None  # nothing queued this worker could ever run
    one = {**params, "lease": secrets.token_hex(16)}
    if fits(head, params):
        row = tx.one("claim_id", id=head["id"], **_claim_keys(one))
        if row is not None and head["pending"] == "resources":
            _release(tx, head)
        return row
    _mark(tx, head, params)
    _hold_back(tx, head, whole)
    start = reservation_start(head, params, box)
    if start is None:
        return None  # hold everything back until the head fits
    return tx.one("claim_backfill_fit", start_bound=start, **one)


def _mark(tx: Transaction, head: Mapping[str, Any], params: Mapping[str, Any]) -> None:
    """Say on the head's row that it waits for resources a worker holds for it (`resources`).
    A no-op once said."""
    wanted = head["gpus"] if head["gpus"] is not None else params["default_gpus"]
    words = (
        f"worker {params['worker']} has reserved for it: it waits for {max(1.0, wanted):g} "
        "GPU(s) that running jobs hold, and smaller jobs that would delay it are held back"
    )
    tx.all("mark_reserved", id=head["id"], words=words, now=params["now"])


def _hold_back(tx: Transaction, head: Mapping[str, Any], whole: Mapping[str, Any]) -> None:
    """A claim that reserves names the jobs it holds back `reserved_for:<id>` in its own
    transaction (issue 45), not at the next pending sweep (5 s): whoever reads the head's
    `resources` mark reads its queue's held-back jobs named too, and each later claim of the
    reservation names those submitted since. The first HOLD_BACK_NAMED in claim order, so a
    claim costs the same at any depth; the sweep names any past them, as it did all before.
    A mark that says so already is not rewritten."""
    reason, words = held_back(head, head["queue"])
    tx.all(
        "hold_back_fit",
        reason=reason,
        words=words,
        queue=head["queue"],
        head=head["id"],
        limit=HOLD_BACK_NAMED,
        **{k: v for k, v in _unlocked(whole).items() if k != "queues"},
    )


def _release(tx: Transaction, head: Mapping[str, Any]) -> None:
    """The reserving worker took its head: the jobs it held back lose that reason at once."""
    tx.all(
        "release_held_back",
        ns=head["namespace"],
        queue=head["queue"],
        reason=f"reserved_for:{head['id']}",
    )


def fits(row: Mapping[str, Any], params: Mapping[str, Any]) -> bool:
    """The `fits` fragment, for one row read already (the head)."""
    wanted = row["gpus"] if row["gpus"] is not None else params["default_gpus"]
    if row["cpus"] is not None and row["cpus"] > params["cpus"]:
        return False
    if row["memory_gb"] is not None and row["memory_gb"] > params["memory_gb"]:
        return False
    if wanted == 0:
        return True
    room = params["gpu_share"] if wanted < 1 else params["gpus_whole"]
    if room < wanted:
        return False
    if row["gpu_memory_gb"] is not None and row["gpu_memory_gb"] > params["gpu_memory_gb"]:
        return False
    pattern = row["gpu_type"]
    return pattern is None or re.search(pattern, params["gpu_names"]) is not None


def reservation_start(
    head: Mapping[str, Any], params: Mapping[str, Any], box: Mapping[str, Any]
) -> float | None:
    """When the head surely fits, from the running jobs' timeouts; None: no such time known
    (it waits on CPUs or memory, or on a job with no timeout)."""
    wanted = head["gpus"] if head["gpus"] is not None else params["default_gpus"]
    if wanted == 0 or not fits({**head, "gpus": 0}, params):
        return None
    need = max(1.0, float(wanted))
    for at, whole in box["whole_free_at"]:
        if whole >= need:
            return float(at)
    return None


_CLAIM_KEYS = ("lease", "expires", "worker", "now")


def _claim_keys(params: Mapping[str, Any]) -> dict[str, Any]:
    return {k: params[k] for k in _CLAIM_KEYS}


def _unlocked(params: Mapping[str, Any]) -> dict[str, Any]:
    """The head read binds no claim of its own."""
    return {k: v for k, v in params.items() if k not in ("expires", "worker", "lease")}
