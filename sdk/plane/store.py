"""The plane's semantics, written once over any connector.

Every rule of the invocation model lives here or in `sql/queries.sql`: idempotent keys, claim
order, leases and their fencing, retries with backoff, cancel and kill, the journal. The embedded
`Dispatch`, the HTTP control plane and the Postgres scale-out all call this class; none of them
re-implements a rule. Payloads and results stay opaque bytes: the store never decodes them.
"""

from __future__ import annotations

import json
import math
import random
import secrets
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgpack
from ulid import ULID

from .. import signing
from ..errors import Conflict, DispatchError, InvalidArgument, LeaseLost, NotFound
from ..types import (
    DEFAULT_QUEUE,
    DEFAULT_QUEUE_DESCRIPTION,
    QUEUE_STATES,
    Ack,
    Claim,
    Frame,
    Invocation,
    Kind,
    QueueInfo,
    SubmitRequest,
    WorkerInfo,
    check_name,
    check_state,
    normalize_kind,
)
from .admission import admit, deadline_for
from .connector import Connector, Row, Transaction
from .elasticity import check_scaling
from .steal import claim_with_steal_delay
from .wakeup import work_key

if TYPE_CHECKING:
    from .retention import Trimmed

#: Retry backoff: attempt n waits RETRY_BASE_S * 2**(n-1), capped.
RETRY_BASE_S = 0.5
RETRY_CAP_S = 300.0
#: A worker whose heartbeat is older than this no longer counts as a member of its queues.
WORKER_STALE_S = 120.0
#: Claims sweep expired leases and start deadlines on their way, at most this often per
#: process: a lease is tens of seconds, so a sweep a few milliseconds late changes nothing,
#: and a busy worker stops paying three extra statements per job.
SWEEP_EVERY_S = 0.05
#: Most jobs one claim_many takes, and most acks one ack_many settles.
MAX_BATCH = 1000
#: Most frames one read returns; a reader pages with `since`.
FRAME_PAGE = 1000

ELASTICITY_KINDS = ("none", "fixed", "elastic", "fully_elastic")
ON_FULL = ("reject", "block")


def topic_channel(namespace: str, queue: str, name: str) -> str:
    return f"topic:{namespace}/{queue}/{name}"


def new_id() -> str:
    return str(ULID())


class SqlStore:
    def __init__(self, connector: Connector) -> None:
        self.connector = connector
        self.waker = connector.waker
        #: Set by whoever holds the server's secret (`lakeshore server`, a keyed Dispatch):
        #: each accepted payload is then signed (sdk/signing.py). Never stored in the store.
        self.signing_key: bytes | None = None
        self._swept_at = 0.0

    def close(self) -> None:
        self.connector.close()

    # -- namespaces ---------------------------------------------------------------------------

    def ensure_namespace(self, ns: str, org: str | None = None) -> None:
        check_name(ns, "namespace")
        with self.connector.transaction() as tx:
            tx.all("ensure_namespace", ns=ns, org=org, now=time.time())

    def namespace(self, ns: str) -> Row | None:
        with self.connector.transaction(write=False) as tx:
            return tx.one("get_namespace", ns=ns)

    def org_namespaces(self, ns: str) -> list[str]:
        with self.connector.transaction(write=False) as tx:
            row = tx.one("get_namespace", ns=ns)
            if row is None:
                raise NotFound(f"unknown namespace '{ns}'")
            return [r["name"] for r in tx.all("org_namespaces", ns=ns, org=row["org"])]

    # -- submit and read ----------------------------------------------------------------------

    def submit(self, ns: str, queue: str, requests: Sequence[SubmitRequest]) -> list[str]:
        """Enqueue a batch in one transaction; a key already used returns the existing id."""
        check_name(queue)
        for req in requests:
            _check_submit(req)
        now = time.time()
        # Ids in request order (ULIDs: the claim order of equal priorities); rows inserted in key
        # order, so two concurrent batches sharing keys lock them in one order and never
        # deadlock each other (Postgres holds each inserted key's index entry to commit).
        ids = [new_id() for _ in requests]
        order = sorted(range(len(requests)), key=lambda i: requests[i].key or "")
        with self.connector.transaction() as tx:
            info = self._queue_for_submit(tx, ns, queue, now)
            admit(tx, info, requests, now)
            deadline_at = deadline_for(info, now)
            for i in order:
                req = requests[i]
                key = self.signing_key
                row = tx.one(
                    "insert_invocation_signed",
                    id=ids[i],
                    ns=ns,
                    queue=queue,
                    priority=float(req.priority),
                    key=req.key,
                    payload=req.payload,
                    max_attempts=req.max_attempts,
                    timeout_s=req.timeout_s,
                    now=now,
                    deadline_at=deadline_at,
                    signature=signing.sign(key, ns, queue, ids[i], bytes(req.payload))
                    if key
                    else None,
                )
                if row is None:  # the key exists: idempotent resubmit
                    row = tx.one("id_by_key", ns=ns, queue=queue, key=req.key)
                    assert row is not None  # the conflict that suppressed the insert
                ids[i] = row["id"]
        # Only this queue's claim polls re-read; no reader waits on a job that did not exist.
        self.waker.notify(work=[work_key(ns, queue)], reads=False)
        return ids

    def _queue_for_submit(self, tx: Transaction, ns: str, queue: str, now: float) -> QueueInfo:
        row = tx.one("get_queue", ns=ns, name=queue)
        if row is None:
            self._create_queue_row(tx, ns, queue, "fifo", "", now)
            row = tx.one("get_queue", ns=ns, name=queue)
            assert row is not None
        info = _queue_info(row)
        if info.state != "active":
            raise Conflict(
                f"queue '{queue}' is {info.state}: it accepts no submits"
                + (" (unarchive it to reopen)" if info.state == "archived" else "")
            )
        return info

    def invocation(self, ns: str, inv_id: str) -> Invocation:
        with self.connector.transaction(write=False) as tx:
            row = tx.one("get_invocation", id=inv_id, ns=ns)
        if row is None:
            raise NotFound(f"unknown invocation '{inv_id}'")
        return _invocation(row)

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

    # -- claim and settle ---------------------------------------------------------------------

    def claim_many(
        self,
        ns: str,
        queues: Sequence[str],
        *,
        worker: str,
        lease_s: float,
        limit: int,
        kind: str | None = None,
        temperature: float = 1.0,
    ) -> list[Claim]:
        """Up to `limit` jobs in `kind` order in one transaction; exactly one worker gets each.

        One commit for the batch is the point: a daemon that prefetches pays one durable write
        per batch instead of one per job. Each job is picked as a single claim would pick it,
        so a batch never reorders a queue.
        """
        names = [check_name(q) for q in queues] or [DEFAULT_QUEUE]
        if not 1 <= limit <= MAX_BATCH:
            raise InvalidArgument(f"a claim takes 1 to {MAX_BATCH} jobs, not {limit}")
        now = time.time()
        params: dict[str, Any] = {
            "ns": ns,
            "queues": names,
            "now": now,
            "expires": now + lease_s,
            "worker": worker,
        }
        # Not durable: a claim that a power cut undoes only puts its jobs back in the queue
        # (the worker's settle is then refused and they run again), and skipping its fsync
        # takes one of the three disk flushes out of every job's path.
        with self.connector.transaction(durable=False) as tx:
            expired = 0
            if now - self._swept_at >= SWEEP_EVERY_S:
                self._swept_at = now
                expired = self._sweep(tx, now)
            resolved = normalize_kind(kind) if kind else self._queue_kind(tx, ns, names)
            rows = self._claim_rows(tx, resolved, temperature, params, limit)
        if expired:  # the sweep may have requeued or ended anything
            self.waker.notify()
        elif rows:  # room that a blocked submit may wait for; nothing ended, nothing to read
            self.waker.notify(work=(), reads=False)
        return [_claim(row) for row in rows]

    def _claim_rows(
        self,
        tx: Transaction,
        kind: Kind,
        temperature: float,
        params: dict[str, Any],
        limit: int,
    ) -> list[Row]:
        """Up to `limit` claimed rows, in the order single claims would have taken them."""
        if limit > 1 and kind == "fifo" and len(params["queues"]) == 1:
            batch = tx.all("claim_fifo_batch", lease=secrets.token_hex(16), limit=limit, **params)
            return sorted(batch, key=lambda r: (-r["priority"], r["id"]))
        rows: list[Row] = []
        for _ in range(limit):
            one = {**params, "lease": secrets.token_hex(16)}
            row = claim_with_steal_delay(
                tx, one, lambda p: self._claim_row(tx, kind, temperature, p)
            )
            if row is None:
                break
            rows.append(row)
        return rows

    def _queue_kind(self, tx: Transaction, ns: str, names: Sequence[str]) -> Kind:
        row = tx.one("get_queue", ns=ns, name=names[0])
        return normalize_kind(row["kind"]) if row else "fifo"

    def _claim_row(
        self, tx: Transaction, kind: Kind, temperature: float, params: dict[str, Any]
    ) -> Row | None:
        if kind == "fifo":
            return tx.one("claim_fifo", **params)
        if kind == "filo":
            return tx.one("claim_filo", **params)
        levels = tx.all(
            "priority_levels", ns=params["ns"], queues=params["queues"], now=params["now"]
        )
        if not levels:
            return None
        level = boltzmann_level([(r["priority"], r["n"]) for r in levels], temperature)
        return tx.one("claim_level", priority=level, **params) or tx.one("claim_fifo", **params)

    def sweep(self) -> int:
        """End or requeue every attempt whose lease ran out; returns how many moved."""
        with self.connector.transaction() as tx:
            moved = self._sweep(tx, time.time())
        if moved:
            self.waker.notify()
        return moved

    def _sweep(self, tx: Transaction, now: float) -> int:
        timed_out = tx.all("expire_deadlines", now=now)
        requeued = tx.all("requeue_expired", now=now)
        ended = tx.all("end_expired", now=now)
        for row in ended:  # an ERROR frame, so a stream raises as result() does
            self._append(tx, row["id"], "ERROR", msgpack.packb(row["error"]), now)
        return len(timed_out) + len(requeued) + len(ended)

    def ack(self, inv_id: str, lease: str, result: bytes | None, *, ns: str | None = None) -> None:
        (error,) = self.ack_many([Ack(inv_id, lease, result)], ns=ns)
        if error is not None:
            raise error

    def ack_many(self, acks: Sequence[Ack], *, ns: str | None = None) -> list[DispatchError | None]:
        """Settle many attempts as succeeded in one transaction; an error (or None) per ack.

        One refused ack (its lease lost, say) refuses only itself: the others still commit.
        With `ns`, an id of another namespace is refused as unknown, as the single ack route
        refuses it.
        """
        if len(acks) > MAX_BATCH:
            raise InvalidArgument(f"at most {MAX_BATCH} acks in one call, not {len(acks)}")
        out: list[DispatchError | None] = []
        now = time.time()
        with self.connector.transaction() as tx:
            owned = None
            if ns is not None and acks:
                rows = tx.all("ids_in_namespace", ns=ns, ids=[a.id for a in acks])
                owned = {r["id"] for r in rows}
            for a in acks:
                if owned is not None and a.id not in owned:
                    out.append(NotFound(f"unknown invocation '{a.id}'"))
                    continue
                # No END frame: a reader that finds no more frames and a succeeded row has
                # reached the end, which saves a write on every job that never streamed.
                if tx.one("settle_success", id=a.id, lease=a.lease, result=a.result, now=now):
                    out.append(None)
                    continue
                try:
                    self._refuse_settle(tx, a.id, a.lease, "succeeded", "ack")
                    out.append(None)
                except DispatchError as exc:
                    out.append(exc)
        if acks:
            self.waker.notify(work=())
        return out

    def nack(self, inv_id: str, lease: str, *, error: str, retry: bool = True) -> str:
        """Fail this attempt; requeue with backoff while attempts remain. Returns the new state."""
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
                    "settle_terminal", id=inv_id, lease=lease, state="failed", error=error, now=now
                ):
                    self._append(tx, inv_id, "ERROR", msgpack.packb(error), now)
                else:
                    self._refuse_settle(tx, inv_id, lease, "failed", "nack")
                    return "failed"
        self.waker.notify()  # after the commit, so a woken reader sees the new state
        return state

    def end(self, inv_id: str, lease: str, *, state: str, error: str) -> None:
        """End an attempt as killed or timeout (the daemon terminated it)."""
        if state not in ("killed", "timeout", "failed"):
            raise InvalidArgument(f"cannot end an attempt as '{state}'; use killed|timeout|failed")
        now = time.time()
        with self.connector.transaction() as tx:
            if tx.one("settle_terminal", id=inv_id, lease=lease, state=state, error=error, now=now):
                self._append(tx, inv_id, "ERROR", msgpack.packb(error), now)
            else:
                self._refuse_settle(tx, inv_id, lease, state, "end")
                return
        self.waker.notify()

    def release(self, inv_id: str, lease: str) -> bool:
        """Give a claimed job back unrun (a draining daemon), without spending an attempt."""
        with self.connector.transaction() as tx:
            done = tx.one("release", id=inv_id, lease=lease) is not None
        if done:
            self.waker.notify()
        return done

    def _refuse_settle(
        self, tx: Transaction, inv_id: str, lease: str, state: str, verb: str
    ) -> None:
        """A settle that matched nothing: a repeat of one that landed is fine, else refuse."""
        row = tx.one("lease_of", id=inv_id)
        if row is None:
            raise NotFound(f"unknown invocation '{inv_id}'")
        if row["lease"] == lease and row["state"] == state:
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

    # -- the journal --------------------------------------------------------------------------

    def post(
        self, channel: str, kind: str, value: bytes | None, *, lease: str | None = None
    ) -> int:
        """Append a frame. Invocation journals need the attempt's lease; topics are open."""
        if kind not in ("VALUE", "ERROR", "END"):
            raise InvalidArgument(f"unknown frame kind '{kind}'; use VALUE|ERROR|END")
        now = time.time()
        with self.connector.transaction() as tx:
            if not channel.startswith("topic:"):
                held = tx.one("lease_of", id=channel)
                if held is None:
                    raise NotFound(f"unknown invocation '{channel}'")
                if lease is None or held["lease"] != lease or held["state"] != "running":
                    raise LeaseLost(
                        f"post refused: invocation '{channel}' is not held by this worker"
                    )
            last = tx.one("last_frame", channel=channel)
            if last is not None and last["kind"] in ("END", "ERROR"):
                raise Conflict(f"the journal of '{channel}' is closed (it ended at {last['seq']})")
            seq = self._append(tx, channel, kind, value, now)
        self.waker.notify(work=())
        return seq

    def _append(
        self, tx: Transaction, channel: str, kind: str, value: bytes | None, now: float
    ) -> int:
        row = tx.one("append_frame", channel=channel, kind=kind, value=value, now=now)
        assert row is not None
        return int(row["seq"])

    def frames(self, channel: str, since: int = -1, limit: int = FRAME_PAGE) -> list[Frame]:
        with self.connector.transaction(write=False) as tx:
            rows = tx.all("frames_since", channel=channel, since=since, limit=limit)
        return [Frame(seq=r["seq"], kind=r["kind"], value=r["value"]) for r in rows]

    # -- queues -------------------------------------------------------------------------------

    def _create_queue_row(
        self, tx: Transaction, ns: str, name: str, kind: str, description: str, now: float
    ) -> bool:
        created = tx.one(
            "ensure_queue", ns=ns, name=name, kind=kind, description=description, now=now
        )
        if created:
            self._event(tx, ns, name, "created", {"kind": kind}, now)
        return created is not None

    def _event(
        self, tx: Transaction, ns: str, queue: str, kind: str, detail: dict[str, Any], now: float
    ) -> None:
        tx.all("insert_event", ns=ns, queue=queue, now=now, kind=kind, detail=json.dumps(detail))

    def ensure_default_queue(self, ns: str) -> None:
        with self.connector.transaction() as tx:
            self._create_queue_row(
                tx, ns, DEFAULT_QUEUE, "fifo", DEFAULT_QUEUE_DESCRIPTION, time.time()
            )

    def create_queue(
        self,
        ns: str,
        name: str,
        *,
        kind: str = "fifo",
        description: str = "",
        elasticity: dict[str, Any] | None = None,
        admission: dict[str, Any] | None = None,
    ) -> QueueInfo:
        check_name(name)
        stored_kind = kind if kind == "priority" else normalize_kind(kind)
        elasticity = check_elasticity(elasticity or {"kind": "none"})
        admission = check_admission(admission or {})
        now = time.time()
        with self.connector.transaction() as tx:
            if not self._create_queue_row(tx, ns, name, stored_kind, description, now):
                raise Conflict(f"queue '{name}' already exists in namespace '{ns}'")
            tx.all(
                "update_queue",
                ns=ns,
                name=name,
                kind=stored_kind,
                state="active",
                description=description,
                elasticity=json.dumps(elasticity),
                admission=json.dumps(admission),
                now=now,
            )
            row = tx.one("get_queue", ns=ns, name=name)
        assert row is not None
        return _queue_info(row)

    def queue(self, ns: str, name: str) -> QueueInfo:
        if name == DEFAULT_QUEUE:
            self.ensure_default_queue(ns)
        with self.connector.transaction(write=False) as tx:
            row = tx.one("get_queue", ns=ns, name=name)
        if row is None:
            raise NotFound(f"unknown queue '{name}' in namespace '{ns}'")
        return _queue_info(row)

    def queues(self, namespaces: Sequence[str], state: str | None = None) -> list[QueueInfo]:
        if state is not None and state not in QUEUE_STATES:
            raise InvalidArgument(f"unknown queue state '{state}'; use {'|'.join(QUEUE_STATES)}")
        for ns in namespaces:
            self.ensure_default_queue(ns)
        with self.connector.transaction(write=False) as tx:
            rows = tx.all("list_queues", namespaces=list(namespaces))
        infos = [_queue_info(r) for r in rows]
        return [q for q in infos if state is None or q.state == state]

    def patch_queue(self, ns: str, name: str, changes: dict[str, Any]) -> QueueInfo:
        allowed = {"description", "admission", "elasticity", "kind"}
        unknown = set(changes) - allowed
        if unknown:
            raise InvalidArgument(
                f"cannot patch {', '.join(sorted(unknown))}; patchable fields: "
                "description, admission, elasticity"
            )
        current = self.queue(ns, name)
        if "kind" in changes and changes["kind"] != current.kind:
            raise InvalidArgument(
                f"cannot change the kind of queue '{name}' ({current.kind}); recreate the queue"
            )
        elasticity = dict(current.elasticity)
        if "elasticity" in changes:
            patch = changes["elasticity"]
            if not isinstance(patch, dict):
                raise InvalidArgument("elasticity must be an object")
            if "kind" in patch and patch["kind"] != elasticity.get("kind", "none"):
                raise InvalidArgument(
                    f"cannot change elasticity kind of queue '{name}' "
                    f"({elasticity.get('kind', 'none')} -> {patch['kind']}) with patch; "
                    "PATCH the whole elasticity object over HTTP or recreate the queue"
                )
            elasticity = check_elasticity({**elasticity, **patch})
        admission = dict(current.admission)
        if "admission" in changes:
            if not isinstance(changes["admission"], dict):
                raise InvalidArgument("admission must be an object")
            admission = check_admission({**admission, **changes["admission"]})
        description = changes.get("description", current.description)
        if not isinstance(description, str):
            raise InvalidArgument("description must be a string")
        return self._update_queue(
            ns,
            current,
            "patched",
            {"fields": sorted(changes)},
            description=description,
            elasticity=elasticity,
            admission=admission,
        )

    def replace_elasticity(self, ns: str, name: str, elasticity: dict[str, Any]) -> QueueInfo:
        current = self.queue(ns, name)
        return self._update_queue(
            ns,
            current,
            "patched",
            {"fields": ["elasticity"]},
            elasticity=check_elasticity(elasticity),
        )

    def set_queue_state(self, ns: str, name: str, action: str) -> QueueInfo:
        target = {"archive": "archived", "unarchive": "active", "drain": "draining"}.get(action)
        if target is None:
            raise InvalidArgument(f"unknown queue action '{action}'; use archive|unarchive|drain")
        if name == DEFAULT_QUEUE and action == "archive":
            raise Conflict("the default queue cannot be archived or deleted")
        current = self.queue(ns, name)
        event = {"archive": "archived", "unarchive": "unarchived", "drain": "drained"}[action]
        return self._update_queue(ns, current, event, {"from": current.state}, state=target)

    def _update_queue(
        self, ns: str, current: QueueInfo, event: str, detail: dict[str, Any], **fields: Any
    ) -> QueueInfo:
        now = time.time()
        merged = {
            "kind": current.kind,
            "state": current.state,
            "description": current.description,
            "elasticity": current.elasticity,
            "admission": current.admission,
            **fields,
        }
        with self.connector.transaction() as tx:
            tx.all(
                "update_queue",
                ns=ns,
                name=current.name,
                kind=merged["kind"],
                state=merged["state"],
                description=merged["description"],
                elasticity=json.dumps(merged["elasticity"]),
                admission=json.dumps(merged["admission"]),
                now=now,
            )
            self._event(tx, ns, current.name, event, detail, now)
            row = tx.one("get_queue", ns=ns, name=current.name)
        self.waker.notify()
        assert row is not None
        return _queue_info(row)

    def delete_queue(self, ns: str, name: str, *, force: bool = False) -> None:
        if name == DEFAULT_QUEUE:
            raise Conflict("the default queue cannot be archived or deleted")
        self.queue(ns, name)  # 404 first
        members = self.members(ns, name)
        if members and not force:
            raise Conflict(
                f"queue '{name}' has {len(members)} member worker(s) "
                f"({', '.join(w.name for w in members)}); remove them or use --force"
            )
        now = time.time()
        with self.connector.transaction() as tx:
            for w in members:
                kept = [q for q in w.queues if q != name]
                tx.all("set_worker_queues", id=w.id, queues=json.dumps(kept))
            tx.all("cancel_queue_backlog", ns=ns, queue=name, now=now)
            tx.all("delete_queue", ns=ns, name=name)
            self._event(tx, ns, name, "deleted", {"force": force, "members": len(members)}, now)
        self.waker.notify()

    def events(self, ns: str, name: str, *, limit: int = 50) -> list[dict[str, Any]]:
        if not 1 <= limit <= 1000:
            raise InvalidArgument(f"limit must be between 1 and 1000, got {limit}")
        self.queue(ns, name)
        with self.connector.transaction(write=False) as tx:
            rows = tx.all("list_events", ns=ns, queue=name, limit=limit)
        return [{**r, "detail": json.loads(r["detail"])} for r in rows]

    def record_event(self, ns: str, queue: str, kind: str, detail: dict[str, Any]) -> None:
        with self.connector.transaction() as tx:
            self._event(tx, ns, queue, kind, detail, time.time())

    def stats(self, ns: str, name: str) -> dict[str, Any]:
        self.queue(ns, name)
        members = self.members(ns, name)
        slots = sum(int(w.info.get("concurrency", 1)) for w in members)
        with self.connector.transaction(write=False) as tx:
            counts = {
                s: int((tx.one("count_state", ns=ns, queue=name, state=s) or {"n": 0})["n"])
                for s in ("queued", "running")
            }
        return {
            "queue": name,
            "namespace": ns,
            "daemon_count": len(members),
            "slots": slots,
            "running": counts["running"],
            "pending": counts["queued"],
            "utilization": (counts["running"] / slots) if slots else 0.0,
        }

    # -- workers ------------------------------------------------------------------------------

    def register_worker(
        self,
        ns: str,
        name: str,
        *,
        queues: Sequence[str] = (),
        host: str | None = None,
        pid: int | None = None,
        info: dict[str, Any] | None = None,
    ) -> WorkerInfo:
        """A new worker row; an older live row of the same name is retired (it was replaced)."""
        check_name(name, "worker")
        for q in queues:
            check_name(q)
        worker_id = new_id()
        now = time.time()
        with self.connector.transaction() as tx:
            tx.all("retire_workers_named", ns=ns, name=name)
            tx.all(
                "upsert_worker",
                id=worker_id,
                ns=ns,
                name=name,
                queues=json.dumps(list(queues)),
                host=host,
                pid=pid,
                info=json.dumps(info or {}),
                now=now,
            )
        return self.worker(ns, worker_id)

    def heartbeat(
        self, worker_id: str, load: dict[str, Any], *, state: str = "alive"
    ) -> WorkerInfo:
        with self.connector.transaction() as tx:
            row = tx.one(
                "heartbeat_worker",
                id=worker_id,
                load=json.dumps(load),
                now=time.time(),
                state=state,
            )
            if row is None:
                raise NotFound(f"unknown worker '{worker_id}'")
            full = tx.one("get_worker_by_id", id=worker_id)
        assert full is not None
        return _worker_info(full)

    def worker(self, ns: str, ref: str) -> WorkerInfo:
        with self.connector.transaction(write=False) as tx:
            row = tx.one("get_worker", ns=ns, ref=ref)
        if row is None:
            raise NotFound(f"unknown worker '{ref}' in namespace '{ns}'")
        return _worker_info(row)

    def workers(self, ns: str) -> list[WorkerInfo]:
        with self.connector.transaction(write=False) as tx:
            rows = tx.all("list_workers", ns=ns)
        return [_worker_info(r) for r in rows]

    def members(self, ns: str, queue: str) -> list[WorkerInfo]:
        now = time.time()
        return [
            w
            for w in self.workers(ns)
            if now - w.heartbeat_at < WORKER_STALE_S
            and (queue in w.queues or (queue == DEFAULT_QUEUE and not w.queues))
        ]

    def update_worker_queues(
        self, ns: str, ref: str, *, add: Sequence[str] = (), remove: Sequence[str] = ()
    ) -> WorkerInfo:
        for q in [*add, *remove]:
            check_name(q)
            if q == DEFAULT_QUEUE:
                raise InvalidArgument(
                    "the default queue is the empty membership: remove every queue instead "
                    "of adding or removing 'default'"
                )
        current = self.worker(ns, ref)
        queues = [q for q in current.queues if q not in remove]
        queues += [q for q in add if q not in queues]
        with self.connector.transaction() as tx:
            tx.all("set_worker_queues", id=current.id, queues=json.dumps(queues))
        return self.worker(ns, current.id)

    def set_worker_state(self, ns: str, ref: str, state: str) -> WorkerInfo:
        if state not in ("alive", "draining", "gone"):
            raise InvalidArgument(f"unknown worker state '{state}'; use alive|draining|gone")
        current = self.worker(ns, ref)
        with self.connector.transaction() as tx:
            tx.all("set_worker_state", id=current.id, state=state)
        return self.worker(ns, current.id)

    # -- jobs: listing and operator retries (`lakeshore jobs`, the dashboard) ------------------

    def invocations(
        self,
        ns: str,
        *,
        queue: str | None = None,
        state: str | None = None,
        limit: int = 50,
        before: str | None = None,
    ) -> list[Invocation]:
        """Newest first, filtered; rows carry no result bytes (read one by id for its result).

        `before` pages: pass the last id of a page to get the next, older one.
        """
        if queue is not None:
            check_name(queue)
        if state is not None:
            check_state(state)
        if not 1 <= limit <= 1000:
            raise InvalidArgument(f"limit must be between 1 and 1000, got {limit}")
        if before is not None and not (before.isascii() and before.isalnum() and len(before) <= 64):
            raise InvalidArgument(f"before must be an invocation id, got {before!r}")
        with self.connector.transaction(write=False) as tx:
            rows = tx.all(
                "list_invocations", ns=ns, queue=queue, state=state, before=before, limit=limit
            )
        return [_invocation(r) for r in rows]

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
            info = self._queue_for_submit(tx, ns, row["queue"], now)
            done = tx.one("retry_terminal", id=inv_id, ns=ns, deadline_at=deadline_for(info, now))
            if done is None:  # settled differently between the read and the write
                raise Conflict(f"cannot retry invocation '{inv_id}': its state just changed")
            tx.all("retry_clear_frames", channel=inv_id)
            row = tx.one("get_invocation", id=inv_id, ns=ns)
        self.waker.notify()
        assert row is not None
        return _invocation(row)

    def depth_by_state(self, ns: str) -> dict[str, dict[str, int]]:
        """{queue: {state: count}} over every state, for the dashboard."""
        with self.connector.transaction(write=False) as tx:
            rows = tx.all("depth_by_state", ns=ns)
        out: dict[str, dict[str, int]] = {}
        for r in rows:
            out.setdefault(r["queue"], {})[r["state"]] = int(r["n"])
        return out

    def finished_since(self, ns: str, since: float, *, limit: int = 20000) -> list[Row]:
        """Completions since `since` (queue, state and the three timestamps), newest first."""
        with self.connector.transaction(write=False) as tx:
            return tx.all("finished_since", ns=ns, since=since, limit=limit)

    def running_by_worker(self, ns: str) -> dict[str, int]:
        with self.connector.transaction(write=False) as tx:
            rows = tx.all("running_by_worker", ns=ns)
        return {r["worker"]: int(r["n"]) for r in rows if r["worker"] is not None}

    def namespace_events(self, ns: str, *, limit: int = 50) -> list[dict[str, Any]]:
        """Every queue's events in the namespace, newest first (the dashboard's scaling log)."""
        with self.connector.transaction(write=False) as tx:
            rows = tx.all("namespace_events", ns=ns, limit=limit)
        return [{**r, "detail": json.loads(r["detail"])} for r in rows]

    def record_events(
        self, events: Sequence[tuple[str, str, str, dict[str, Any]]], now: float
    ) -> None:
        """(namespace, queue, kind, detail) events in one transaction: a controller tick's."""
        with self.connector.transaction() as tx:
            for ns, queue, kind, detail in events:
                tx.all(
                    "insert_event",
                    ns=ns,
                    queue=queue,
                    now=now,
                    kind=kind,
                    detail=json.dumps(detail, default=str),
                )

    def fleet_view(self) -> dict[str, list[Row]]:
        """Every namespace's queues, live counts, running jobs per worker and worker rows, read in
        one transaction (the controller's view of the world; sql: controller_*)."""
        with self.connector.transaction(write=False) as tx:
            return {
                "queues": tx.all("controller_queues"),
                "counts": tx.all("controller_counts"),
                "running": tx.all("controller_running_by_worker"),
                "workers": tx.all("controller_workers"),
            }

    def metrics_view(self, stale_before: float) -> dict[str, list[Row]]:
        """Depth by state, workers by state and events by kind over every namespace, read in one
        transaction (a /metrics scrape; sql: metrics_*)."""
        with self.connector.transaction(write=False) as tx:
            return {
                "depth": tx.all("metrics_depth"),
                "workers": tx.all("metrics_workers", stale_before=stale_before),
                "events": tx.all("metrics_events"),
            }

    def ping(self) -> bool:
        """A round trip to the database: /readyz."""
        with self.connector.transaction(write=False) as tx:
            return tx.one("ping") is not None

    # -- retention (issue 7; the rules are in retention.py) --------------------------------------

    def trim_retention(
        self,
        *,
        frames_older_than_s: float | None = None,
        invocations_older_than_s: float | None = None,
        ns: str | None = None,
        now: float | None = None,
    ) -> Trimmed:
        """Trim frames, then rows, of invocations that ended that long ago (None: keep).

        `ns=None` trims every namespace. Returns counts and the spilled refs to delete.
        """
        from .retention import trim

        return trim(
            self,
            frames_older_than_s=frames_older_than_s,
            invocations_older_than_s=invocations_older_than_s,
            namespace=ns,
            now=now,
        )


# -- validation -------------------------------------------------------------------------------


def _check_submit(req: SubmitRequest) -> None:
    if not isinstance(req.payload, (bytes, bytearray, memoryview)):
        raise InvalidArgument("payload must be encoded bytes")
    if req.key is not None and (not isinstance(req.key, str) or not 0 < len(req.key) <= 512):
        raise InvalidArgument("key must be a non-empty string of at most 512 characters")
    if (
        isinstance(req.priority, bool)
        or not isinstance(req.priority, (int, float))
        or not (math.isfinite(req.priority))
    ):
        raise InvalidArgument(f"priority must be a finite number, got {req.priority!r}")
    if not isinstance(req.max_attempts, int) or not 1 <= req.max_attempts <= 1000:
        raise InvalidArgument(f"max_attempts must be an integer 1..1000, got {req.max_attempts!r}")
    if req.timeout_s is not None and (
        isinstance(req.timeout_s, bool)
        or not isinstance(req.timeout_s, (int, float))
        or not 0 < req.timeout_s < math.inf
    ):
        raise InvalidArgument(
            f"timeout_s must be a finite positive number of seconds (leave it out for no "
            f"limit), got {req.timeout_s!r}"
        )


def check_elasticity(value: dict[str, Any]) -> dict[str, Any]:
    kind = value.get("kind", "none")
    if kind not in ELASTICITY_KINDS:
        raise InvalidArgument(f"unknown elasticity kind '{kind}'; use {'|'.join(ELASTICITY_KINDS)}")
    for field in ("min", "max", "target_per_worker", "idle_s", "steal_delay_s", "cost_weight"):
        if field in value and (
            isinstance(value[field], bool)
            or not isinstance(value[field], (int, float))
            or value[field] < 0
        ):
            raise InvalidArgument(f"elasticity.{field} must be a non-negative number")
    # `fixed` without `max` is the Queues page's worked example: a fleet launched by hand
    # (`daemon launch`), which the controller leaves alone (it holds 0 of its own).
    if kind in ("elastic", "fully_elastic") and "max" not in value:
        raise InvalidArgument(f"elasticity kind '{kind}' needs 'max'")
    if "min" in value and "max" in value and value["min"] > value["max"]:
        raise InvalidArgument("elasticity.min must not exceed elasticity.max")
    check_scaling(value)  # the controller's fields: sdk/plane/elasticity.py
    return {**value, "kind": kind}


def check_admission(value: dict[str, Any]) -> dict[str, Any]:
    known = {"max_depth", "on_full", "rate_limit", "deadline_cutoff_s"}
    unknown = set(value) - known
    if unknown:
        raise InvalidArgument(
            f"unknown admission field(s) {', '.join(sorted(unknown))}; "
            f"use {', '.join(sorted(known))}"
        )
    if value.get("on_full", "reject") not in ON_FULL:
        raise InvalidArgument(f"admission.on_full must be reject|block, got {value['on_full']!r}")
    for field in ("max_depth", "rate_limit", "deadline_cutoff_s"):
        v = value.get(field)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0):
            raise InvalidArgument(f"admission.{field} must be a positive number, got {v!r}")
    return value


def boltzmann_level(levels: Sequence[tuple[float, int]], temperature: float) -> float:
    """Pick a priority level with weight count * exp(level / T), exactly.

    Every queued job has probability exp(p/T) / sum(exp(p_i/T)); grouping by level keeps the
    draw exact while reading only one row per distinct priority. T <= 0 is strict priority.
    """
    top = max(p for p, _ in levels)
    if temperature <= 0:
        return top
    weights = [n * math.exp((p - top) / temperature) for p, n in levels]
    return random.choices([p for p, _ in levels], weights=weights)[0]


# -- rows to records --------------------------------------------------------------------------


def _invocation(row: Row) -> Invocation:
    return Invocation(
        id=row["id"],
        namespace=row["namespace"],
        queue=row["queue"],
        state=row["state"],
        priority=row["priority"],
        key=row["key"],
        attempt=row["attempt"],
        max_attempts=row["max_attempts"],
        timeout_s=row["timeout_s"],
        kill_requested=bool(row["kill_requested"]),
        worker=row["worker"],
        error=row["error"],
        result=bytes(row["result"]) if row["result"] is not None else None,
        created_at=row["created_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
    )


def _claim(row: Row) -> Claim:
    return Claim(
        signature=row["signature"],
        id=row["id"],
        namespace=row["namespace"],
        queue=row["queue"],
        payload=bytes(row["payload"]),
        attempt=row["attempt"],
        lease=row["lease"],
        lease_expires_at=row["lease_expires_at"],
        timeout_s=row["timeout_s"],
        priority=row["priority"],
    )


def _queue_info(row: Row) -> QueueInfo:
    return QueueInfo(
        namespace=row["namespace"],
        name=row["name"],
        kind=row["kind"],
        state=row["state"],
        description=row["description"],
        elasticity=json.loads(row["elasticity"]),
        admission=json.loads(row["admission"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _worker_info(row: Row) -> WorkerInfo:
    return WorkerInfo(
        id=row["id"],
        namespace=row["namespace"],
        name=row["name"],
        queues=json.loads(row["queues"]),
        host=row["host"],
        pid=row["pid"],
        info=json.loads(row["info"]),
        load=json.loads(row["load"]),
        state=row["state"],
        created_at=row["created_at"],
        heartbeat_at=row["heartbeat_at"],
    )
