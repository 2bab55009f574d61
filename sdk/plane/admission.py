"""Admission: whether a queue takes a submit now (`max_depth`, `rate_limit`), and its deadline.

Checked inside the submit's own transaction, so every plane (embedded, HTTP, each Postgres
replica) enforces the same numbers from the same rows. A refusal is a `QueueFullError` that says
whether the queue blocks (`on_full: block`: the plane waits for room) and when to retry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dreamlake.lakeshore.errors import QueueFullError
from dreamlake.lakeshore.types import QueueInfo, SubmitRequest

from .connector import Transaction


def admit(tx: Transaction, info: QueueInfo, requests: Sequence[SubmitRequest], now: float) -> None:
    """Raise QueueFullError if the queue cannot take these requests now; else take tokens."""
    policy = info.admission
    if not policy:
        return
    block = policy.get("on_full", "reject") == "block"
    fresh = _new_requests(tx, info, requests)
    if not fresh:
        return  # only idempotent resubmits: they add nothing to the queue
    max_depth = policy.get("max_depth")
    if max_depth is not None:
        row = tx.one("count_state", ns=info.namespace, queue=info.name, state="queued")
        queued = int(row["n"]) if row else 0
        if queued + fresh > int(max_depth):
            raise QueueFullError(
                f"queue '{info.name}' is full: {queued} queued, max_depth {max_depth}"
                + (f", {fresh} more asked" if fresh > 1 else ""),
                retry_after_s=1.0,
                block=block,
            )
    rate = policy.get("rate_limit")
    if rate is not None:
        _take_tokens(tx, info, float(rate), fresh, now, block)


def waits_for_room(admission: Mapping[str, Any]) -> bool:
    """Whether a submit this policy refuses may be waiting for a claim to make room: only a
    `max_depth` that blocks. Room under a rate limit comes from time, and a refusal that
    rejects has nobody waiting, so a claim on any other queue need wake no one."""
    return admission.get("max_depth") is not None and admission.get("on_full") == "block"


def deadline_for(info: QueueInfo, now: float) -> float | None:
    cutoff = info.admission.get("deadline_cutoff_s")
    return now + float(cutoff) if cutoff is not None else None


def _new_requests(tx: Transaction, info: QueueInfo, requests: Sequence[SubmitRequest]) -> int:
    keyed = [r.key for r in requests if r.key is not None]
    existing = sum(
        1
        for key in dict.fromkeys(keyed)
        if tx.one("key_exists", ns=info.namespace, queue=info.name, key=key)
    )
    return len(requests) - existing - (len(keyed) - len(set(keyed)))


def _take_tokens(
    tx: Transaction, info: QueueInfo, rate: float, n: int, now: float, block: bool
) -> None:
    """A token bucket holding one second of submits, refilled at `rate` per second."""
    capacity = max(1.0, rate)
    bucket = tx.one("get_bucket", ns=info.namespace, queue=info.name)
    tokens = capacity
    if bucket is not None:
        tokens = min(capacity, bucket["tokens"] + (now - bucket["updated_at"]) * rate)
    if tokens < n:
        if n > capacity:
            hint = f"; a batch of {n} exceeds the bucket of {capacity:g}: submit smaller batches"
        else:
            hint = ""
        raise QueueFullError(
            f"queue '{info.name}' is over its rate_limit of {rate:g} submits/s{hint}",
            retry_after_s=(n - tokens) / rate,
            block=block and n <= capacity,
        )
    tx.all("put_bucket", ns=info.namespace, queue=info.name, tokens=tokens - n, now=now)
