"""Unschedulable, named (issue 34): a queued job no live daemon of its queue could ever run.

The sweep (the server's timer, an embedded process's reads) looks at the distinct requests of
queued jobs, not at each job (index invocations_shapes), and at every live daemon's offer (its
worker row: GPUs, declared CPUs and memory, --gpus-per-job). A request that a daemon on its queue
could run on its empty box is schedulable; one that none could run is `unschedulable`, with the
reason in words; with no live daemon on the queue it is `waiting_for_capacity`. A request no
live daemon could run but the launch shape of the queue's provider could (sdk/shapes.py) is
`waiting_for_capacity` too, with words naming the shape the controller will launch; one neither
could run is `unschedulable`. A job a live daemon could run, in a queue whose head a worker
reserves for (store/reservation.py marks that head `resources`), is `reserved_for:<head id>`.
A reason clears when a capable daemon arrives. A queue's admission
`unschedulable_fail_after_s` fails such jobs with the reason once they have waited that long.

Reasons are written to their own table (pending_reasons, migration 35), never to the job's row:
a claim on PostgreSQL skips rows another transaction holds (`FOR UPDATE SKIP LOCKED`), so a
sweep that rewrote a job's row hid that job from every claim until it committed.
"""

from __future__ import annotations

import functools
import json
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.plane.connector import Row, Transaction
from dreamlake.lakeshore.resources import describe, gpu_types, type_matches
from dreamlake.lakeshore.shapes import Shape, fits_words, launch_shape

from .base import WORKER_STALE_S

#: The sweep runs at most this often per process: "within 10 s" with room to spare.
EVERY_S = 5.0
#: Overrides EVERY_S, in seconds (read on first use): a quicker sweep costs the store a few
#: reads of the queued requests more often (the test suite sets 0.25 s).
EVERY_ENV = "LAKESHORE_PENDING_SWEEP_S"
#: Columns a request is stored in (migration 24), as set_pending and clear_pending bind them.
SHAPE = ("gpus", "gpu_type", "gpu_memory_gb", "cpus", "memory_gb")

#: (transaction, invocation id, error, now): the ERROR frame of a job the sweep failed.
Append = Callable[[Transaction, str, str, float], None]
#: The provider a queue's controller launches through and its launch shape (None: unknown);
#: None: the controller launches nothing for the queue.
Launches = tuple[str, Shape | None] | None


def sweep(tx: Transaction, now: float, append: Append) -> int:
    """Write each queued request's pending reason; fail what waited past its queue's limit.
    Returns how many rows changed."""
    workers = tx.all("live_workers", since=now - WORKER_STALE_S)
    tx.all("forget_pending")  # the reasons of jobs that left the queue since
    changed = 0
    limits: dict[tuple[str, str], float | None] = {}
    launches: dict[tuple[str, str], Launches] = {}
    heads: dict[tuple[str, str], Row] = {}
    for row in tx.all("reserved_heads"):
        heads.setdefault((row["namespace"], row["queue"]), row)
    for shape in _shapes(tx.all("queued_shapes")):
        ns, queue = shape["namespace"], shape["queue"]
        if (ns, queue) not in launches:
            launches[(ns, queue)] = launches_of(tx, ns, queue)
        reason, words = judge(shape, serving(workers, ns, queue), queue, launches[(ns, queue)])
        keep = ""
        head = heads.get((ns, queue))
        if reason is None and head is not None:  # runnable, but held back by the reservation
            keep = head["id"]
            reason, words = held_back(head, queue)
        keys = {k: shape[k] for k in SHAPE}
        where = {"ns": ns, "queue": queue, "keep": keep, "now": now, **keys}
        if reason is None:
            changed += len(tx.all("clear_pending", **where))
        else:
            changed += len(tx.all("set_pending", reason=reason, words=words, **where))
        if reason != "unschedulable":
            continue
        if (ns, queue) not in limits:
            limits[(ns, queue)] = _fail_after(tx, ns, queue)
        after = limits[(ns, queue)]
        if after is not None and words is not None:
            failed = tx.all(
                "fail_unschedulable",
                ns=ns,
                queue=queue,
                words=words,
                now=now,
                before=now - after,
                **keys,
            )
            for row in failed:
                append(tx, row["id"], words, now)
            changed += len(failed)
    return changed


def _shapes(rows: Sequence[Row]) -> list[Row]:
    """One row per (queue, request): the reason column, which the read groups by, dropped."""
    seen: dict[tuple[Any, ...], Row] = {}
    for row in rows:
        key = (row["namespace"], row["queue"], *(row[k] for k in SHAPE))
        seen.setdefault(key, row)
    return list(seen.values())


def serving(workers: Sequence[Row], ns: str, queue: str) -> list[dict[str, Any]]:
    """The offers (worker rows' info) of the live daemons that serve `queue` in `ns`, less the
    GPUs each has reported failed since it registered (its heartbeat's `gpus_failed`)."""
    out = []
    for w in workers:
        queues = json.loads(w["queues"]) or ["default"]
        if w["namespace"] == ns and queue in queues:
            offer = {"name": w["name"], **json.loads(w["info"])}
            failed = _failed_gpus(w["load"])
            if failed:
                offer["gpus"] = [g for g in offer.get("gpus", []) if g.get("index") not in failed]
            out.append(offer)
    return out


def _failed_gpus(load: str | None) -> set[int]:
    try:
        listed = json.loads(load or "{}").get("gpus_failed") or []
        return {int(g["index"]) for g in listed}
    except (ValueError, TypeError, KeyError, AttributeError):
        return set()  # a load some other worker wrote: nothing to take out


def judge(
    shape: Mapping[str, Any],
    offers: Sequence[Mapping[str, Any]],
    queue: str,
    launches: Launches = None,
) -> tuple[str | None, str | None]:
    """(pending reason, words) for one request on a queue served by `offers`, whose controller
    launches daemons through `launches` (provider name, launch shape; None: no provider).

    A live daemon that could run it: no reason. Else a launch shape that could: waiting for
    that launch. Else, with something to judge by (a daemon, a known shape): unschedulable.
    With neither (nothing serves the queue, and no shape is known), it waits for capacity:
    a daemon may yet be started by hand, or the provider's launches may fit.
    """
    if any(could_run(shape, o) for o in offers):
        return None, None
    request = json.loads(shape["sample"]) if shape.get("sample") else asked(shape)
    provider, launched = launches if launches is not None else (None, None)
    if provider is not None and launched is not None:
        if launched.could_run(request):
            return "waiting_for_capacity", fits_words(request, launched, provider)
        kit = f"provider {provider} launches daemons with {launched.describe()}"
        if not offers:
            return (
                "unschedulable",
                f"needs {describe(request)}; no live daemon serves queue {queue} and {kit}",
            )
        return "unschedulable", f"needs {describe(request)}; {_have(offers, queue)}; {kit}"
    if not offers:
        return "waiting_for_capacity", f"no live daemon serves queue {queue}"
    return "unschedulable", f"needs {describe(request)}; {_have(offers, queue)}"


def held_back(head: Mapping[str, Any], queue: str) -> tuple[str, str]:
    """The reason of a job a live daemon could run that the head's reservation holds back."""
    request = json.loads(head["resources"]) if head.get("resources") else {}
    return (
        f"reserved_for:{head['id']}",
        f"held back: job {head['id']} at the head of queue {queue} has a reservation "
        f"(it needs {describe(request)}); jobs that would delay it wait",
    )


def launches_of(tx: Transaction, ns: str, queue: str) -> Launches:
    """The provider the controller launches the queue's daemons through, and their shape as
    its config and the tables say (sdk/shapes.py); None: the controller launches none."""
    row = tx.one("get_queue", ns=ns, name=queue)
    if row is None:
        return None
    policy = json.loads(row["elasticity"] or "{}")
    name = policy.get("provider")
    if policy.get("kind", "none") == "none" or not name or int(policy.get("max") or 0) <= 0:
        return None
    config = tx.one("provider_get", ns=ns, name=name)
    if config is None:
        return None
    return name, launch_shape(config["kind"], json.loads(config["config"]), policy.get("match"))


def asked(shape: Mapping[str, Any]) -> dict[str, Any]:
    """A stored request's columns as a request (its gpu_type pattern back to names)."""
    out: dict[str, Any] = {k: shape[k] for k in SHAPE if k != "gpu_type" and shape[k] is not None}
    if "gpus" in out and out["gpus"] == int(out["gpus"]):
        out["gpus"] = int(out["gpus"])
    if shape["gpu_type"]:
        out["gpu_type"] = [n.replace("\\.", ".") for n in shape["gpu_type"].split("|")]
    return out


def could_run(shape: Mapping[str, Any], offer: Mapping[str, Any]) -> bool:
    """Whether the daemon of `offer`, with nothing running, could run the request."""
    counted = offer.get("resources")
    if counted is None:
        return True  # a worker that places nothing (run_worker, an older daemon) takes any job
    cpus, memory = counted.get("cpus"), counted.get("memory_gb")
    if cpus is not None and (shape["cpus"] or 0) > cpus:
        return False
    if memory is not None and (shape["memory_gb"] or 0) > memory:
        return False
    wanted = shape["gpus"] if shape["gpus"] is not None else offer.get("gpus_per_job", 0)
    if not wanted:
        return True
    request = asked(shape)
    usable = [
        g
        for g in offer.get("gpus", [])
        if type_matches(request, str(g.get("name", "")))
        and g.get("memory_mb", 0) / 1024 >= (shape["gpu_memory_gb"] or 0)
    ]
    if gpu_types(request):  # all of one type: the placer takes the first type it finds
        by_type = Counter(
            next(t for t in gpu_types(request) if t.lower() in str(g["name"]).lower())
            for g in usable
        )
        return max(by_type.values(), default=0) >= max(1.0, float(wanted))
    return len(usable) >= max(1.0, float(wanted))


def _have(offers: Sequence[Mapping[str, Any]], queue: str) -> str:
    """What the best-equipped daemon on the queue has, in words."""
    best = max(offers, key=lambda o: len(o.get("gpus", [])))
    gpus = best.get("gpus", [])
    if not gpus:
        kit = "no GPU"
    else:
        name, n = Counter(str(g.get("name", "GPU")) for g in gpus).most_common(1)[0]
        memory = max(g.get("memory_mb", 0) for g in gpus) / 1024
        kit = f"{n} x {name}" + (f" ({memory:.0f} GB)" if memory else "")
    counted = best.get("resources") or {}
    extra = [
        f"{counted[k]:g} {u}" for k, u in (("cpus", "CPUs"), ("memory_gb", "GB")) if counted.get(k)
    ]
    return f"the daemons on queue {queue} have at most {kit}" + (
        f", {', '.join(extra)}" if extra else ""
    )


def _fail_after(tx: Transaction, ns: str, queue: str) -> float | None:
    row = tx.one("get_queue", ns=ns, name=queue)
    if row is None:
        return None
    value = json.loads(row["admission"]).get("unschedulable_fail_after_s")
    return None if value is None else float(value)


def due(last: float, now: float | None = None) -> bool:
    return (now if now is not None else time.time()) - last >= every_s()


@functools.cache
def every_s() -> float:
    """How often the sweep runs: EVERY_S, or `$LAKESHORE_PENDING_SWEEP_S`."""
    text = os.environ.get(EVERY_ENV)
    if not text:
        return EVERY_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise InvalidArgument(f"{EVERY_ENV} is a number of seconds above 0, not {text!r}")
    return value
