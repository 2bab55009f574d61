"""Worker rows: register, heartbeat, membership, state."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from dreamlake.lakeshore.errors import InvalidArgument, NotFound
from dreamlake.lakeshore.types import DEFAULT_QUEUE, WorkerInfo, check_host, check_name

from .base import WORKER_STALE_S, StoreBase, new_id
from .records import worker_info_of

#: `preempting`: an operator's `daemon drain NAME --preempt` (issue 35), a notice that the box is
#: going away: its daemon tells its jobs, gives them the grace, and releases what is left.
WORKER_STATES = ("alive", "draining", "preempting", "gone")


class WorkerStore(StoreBase):
    """Worker rows: register, heartbeat, membership, state."""

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
        """A new worker row; an older live row of the same name is retired (it was replaced).

        `host` is the box's host id (`objects.host_id()`): the one its claims name, so that
        jobs whose objects live in that box's tier come to it first (plane/locality.py).
        """
        check_name(name, "worker")
        check_host(host)
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
        return worker_info_of(full)

    def worker(self, ns: str, ref: str) -> WorkerInfo:
        return self._named("get_worker", "worker", worker_info_of, ns, ref=ref)

    def workers(self, ns: str) -> list[WorkerInfo]:
        with self.connector.transaction(write=False) as tx:
            rows = tx.all("list_workers", ns=ns)
        return [worker_info_of(r) for r in rows]

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
        if state not in WORKER_STATES:
            raise InvalidArgument(f"unknown worker state '{state}'; use {'|'.join(WORKER_STATES)}")
        current = self.worker(ns, ref)
        with self.connector.transaction() as tx:
            tx.all("set_worker_state", id=current.id, state=state)
        return self.worker(ns, current.id)
