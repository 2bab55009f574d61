"""Queue rows: create, patch, lifecycle, delete, events, stats (which count members)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from dreamlake.lakeshore.errors import Conflict, InvalidArgument
from dreamlake.lakeshore.plane import locality
from dreamlake.lakeshore.plane.connector import Transaction
from dreamlake.lakeshore.resources import check_resources
from dreamlake.lakeshore.types import (
    DEFAULT_QUEUE,
    DEFAULT_QUEUE_DESCRIPTION,
    MAX_LIST_LIMIT,
    QUEUE_STATES,
    QueueInfo,
    check_name,
    normalize_kind,
)

from .records import check_admission, check_elasticity, queue_info_of
from .workers import WorkerStore


class QueueStore(WorkerStore):
    """Queue rows: create, patch, lifecycle, delete, events, stats (which count members)."""

    def ensure_default_queue(self, ns: str) -> None:
        """Create `default` in `ns` if it is missing; looked for first, so that a listing, which
        calls this, takes the write lock only on a plane that lacks it."""
        with self.connector.transaction(write=False) as tx:
            if tx.one("get_queue", ns=ns, name=DEFAULT_QUEUE) is not None:
                return
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
        resources: dict[str, Any] | None = None,
    ) -> QueueInfo:
        check_name(name)
        stored_kind = kind if kind == "priority" else normalize_kind(kind)
        elasticity = check_elasticity(elasticity or {"kind": "none"})
        admission = check_admission(admission or {})
        request = check_resources(resources or {}, "queue resources")
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
            if request:
                self._write_resources(tx, ns, name, request, now)
            row = tx.one("get_queue", ns=ns, name=name)
        assert row is not None
        return queue_info_of(row)

    @staticmethod
    def _write_resources(
        tx: Transaction, ns: str, name: str, request: dict[str, Any], now: float
    ) -> None:
        """A queue's default request (issue 34): what a job submitted without one asks for."""
        text = json.dumps(request)  # in the order check_resources lists the keys
        tx.all("set_queue_resources", ns=ns, name=name, resources=text, now=now)

    def queue(self, ns: str, name: str) -> QueueInfo:
        if name == DEFAULT_QUEUE:
            self.ensure_default_queue(ns)
        return self._named("get_queue", "queue", queue_info_of, ns, name=name)

    def queues(self, namespaces: Sequence[str], state: str | None = None) -> list[QueueInfo]:
        if state is not None and state not in QUEUE_STATES:
            raise InvalidArgument(f"unknown queue state '{state}'; use {'|'.join(QUEUE_STATES)}")
        for ns in namespaces:
            self.ensure_default_queue(ns)
        with self.connector.transaction(write=False) as tx:
            rows = tx.all("list_queues", namespaces=list(namespaces))
        infos = [queue_info_of(r) for r in rows]
        return [q for q in infos if state is None or q.state == state]

    def patch_queue(self, ns: str, name: str, changes: dict[str, Any]) -> QueueInfo:
        allowed = {"description", "admission", "elasticity", "kind", "resources"}
        unknown = set(changes) - allowed
        if unknown:
            raise InvalidArgument(
                f"cannot patch {', '.join(sorted(unknown))}; patchable fields: "
                "description, admission, elasticity, resources"
            )
        request = (
            check_resources(changes["resources"], "queue resources")
            if "resources" in changes
            else None
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
            resources=request,
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
        self,
        ns: str,
        current: QueueInfo,
        event: str,
        detail: dict[str, Any],
        *,
        resources: dict[str, Any] | None = None,
        **fields: Any,
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
            if resources is not None:
                self._write_resources(tx, ns, current.name, resources, now)
            self._event(tx, ns, current.name, event, detail, now)
            row = tx.one("get_queue", ns=ns, name=current.name)
        self.waker.notify()
        assert row is not None
        return queue_info_of(row)

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
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise InvalidArgument(f"limit must be between 1 and {MAX_LIST_LIMIT}, got {limit}")
        self.queue(ns, name)
        with self.connector.transaction(write=False) as tx:
            rows = tx.all("list_events", ns=ns, queue=name, limit=limit)
        return [{**r, "detail": json.loads(r["detail"])} for r in rows]

    def record_event(self, ns: str, queue: str, kind: str, detail: dict[str, Any]) -> None:
        with self.connector.transaction() as tx:
            self._event(tx, ns, queue, kind, detail, time.time())

    def maps_in_flight(self, ns: str, name: str) -> list[dict[str, Any]]:
        """The maps with jobs still to end in queue `name` (the dashboard's, `status`'s)."""
        with self.connector.transaction(write=False) as tx:
            return _maps_in_flight(tx, ns, name)

    def stats(self, ns: str, name: str) -> dict[str, Any]:
        info = self.queue(ns, name)
        members = self.members(ns, name)
        slots = sum(int(w.info.get("concurrency", 1)) for w in members)
        with self.connector.transaction(write=False) as tx:
            counts = {
                s: int((tx.one("count_state", ns=ns, queue=name, state=s) or {"n": 0})["n"])
                for s in ("queued", "running", "scheduled", "waiting")
            }
            unschedulable = tx.one("unschedulable_in_queue", ns=ns, queue=name)
            waiting = tx.one("waiting_in_queue", ns=ns, queue=name)
            gangs = tx.one("gangs_waiting_in_queue", ns=ns, queue=name)
            maps = _maps_in_flight(tx, ns, name)
        return {
            "queue": name,
            "namespace": ns,
            "daemon_count": len(members),
            "slots": slots,
            "running": counts["running"],
            "pending": counts["queued"],
            "scheduled": counts["scheduled"],
            "waiting": counts["waiting"],
            "utilization": (counts["running"] / slots) if slots else 0.0,
            "locality_wait_s": locality.wait_s(info),
            # Queued jobs no live daemon of the queue could ever run (store/schedulable.py).
            "unschedulable": int(unschedulable["n"]) if unschedulable else 0,
            # ... and those only a daemon the controller would launch could (issue 34, item 7).
            "waiting_for_capacity": int(waiting["n"]) if waiting else 0,
            # Queued multi-node jobs, waiting for all their parts (issue 47).
            "gangs_waiting": int(gangs["n"]) if gangs else 0,
            # The progress of the maps (f.map) with jobs still to end here, oldest first.
            "maps": maps,
        }


#: Unended rows of each state looked at for map ids, and the most maps shown per queue.
MAP_SCAN = 500
MAPS_SHOWN = 5


def _maps_in_flight(tx: Transaction, ns: str, queue: str) -> list[dict[str, Any]]:
    """Per map with jobs running, queued or scheduled near the head of `queue`: its jobs by
    state and in all (a map's total grows while its producer still submits)."""
    ids: set[str] = set()
    for state in ("running", "queued", "scheduled"):
        rows = tx.all("maps_in_flight", ns=ns, queue=queue, state=state, scan=MAP_SCAN)
        ids.update(str(r["map_id"]) for r in rows)
    out = []
    for map_id in sorted(ids)[:MAPS_SHOWN]:  # map ids are ULIDs: oldest first
        counts = {r["state"]: int(r["n"]) for r in tx.all("map_progress", ns=ns, map_id=map_id)}
        out.append({"map_id": map_id, "jobs": sum(counts.values()), "states": counts})
    return out
