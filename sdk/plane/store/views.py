"""Read models over a namespace or every one: the dashboard's, the controller's, /metrics'."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.plane.connector import Row
from dreamlake.lakeshore.plane.providers import ProviderInfo, provider_info
from dreamlake.lakeshore.types import check_name

from .base import StoreBase
from .records import json_object

#: What a queue event's kind looks like (`created`, `scaled`, `scale_error`, ...).
EVENT_KIND = re.compile(r"[a-z][a-z_]{0,63}")


class ViewStore(StoreBase):
    """Read models over a namespace or every one: the dashboard's, the controller's, /metrics'."""

    def depth_by_state(self, ns: str) -> dict[str, dict[str, int]]:
        """{queue: {state: count}} over every state, for the dashboard."""
        with self.connector.transaction(write=False) as tx:
            rows = tx.all("depth_by_state", ns=ns)
        out: dict[str, dict[str, int]] = {}
        for r in rows:
            out.setdefault(r["queue"], {})[r["state"]] = int(r["n"])
        return out

    def pending_by_queue(self, ns: str) -> dict[str, dict[str, int]]:
        """{queue: {reason: count}} of the queued jobs that are `unschedulable` or
        `waiting_for_capacity`, as `stats` counts them per queue, in one read for the dashboard.
        A queue with neither is absent."""
        with self.connector.transaction(write=False) as tx:
            rows = tx.all("pending_by_queue", ns=ns)
        out: dict[str, dict[str, int]] = {}
        for r in rows:
            out.setdefault(r["queue"], {})[r["reason"]] = int(r["n"])
        return out

    def recount_check(self) -> list[Row]:
        """Where the depth counters disagree with a recount of the rows: [] when exact.

        The counters (migration 18) are what every count reads; this is how a test, or an
        operator after a crash, proves them right. It reads every invocation, so it is a check,
        never a read on a request's path. Each row: namespace, queue, state, kept, found.
        """
        with self.connector.transaction(write=False) as tx:
            return tx.all("count_drift")

    def finished_since(self, ns: str, since: float, *, limit: int = 20000) -> list[Row]:
        """Completions since `since` (queue, state and the three timestamps), newest first."""
        with self.connector.transaction(write=False) as tx:
            return tx.all("finished_since", ns=ns, since=since, limit=limit)

    def rollup_since(self, ns: str, since: int) -> list[Row]:
        """The completion rollup (migration 21) from second `since` on: queue, at, kind, bin,
        n. The dashboard's throughput and latency figures; `finished_since` is the scan it
        replaced, kept to check it against."""
        with self.connector.transaction(write=False) as tx:
            return tx.all("rollup_since", ns=ns, since=since)

    def running_by_worker(self, ns: str) -> dict[str, int]:
        with self.connector.transaction(write=False) as tx:
            rows = tx.all("running_by_worker", ns=ns)
        return {r["worker"]: int(r["n"]) for r in rows if r["worker"] is not None}

    def gpus_in_use(self, ns: str) -> dict[str, dict[int, float]]:
        """{worker: {GPU index: share held}} from the placements of running jobs: what the
        dashboard shows as used beside each daemon's GPUs."""
        with self.connector.transaction(write=False) as tx:
            rows = tx.all("running_placements", ns=ns)
        out: dict[str, dict[int, float]] = {}
        for r in rows:
            placed = json_object(r["placement"])
            held = out.setdefault(str(r["worker"]), {})
            for gpu in placed.get("gpus") or []:
                index = int(gpu["index"])
                held[index] = held.get(index, 0.0) + float(gpu.get("share", 1.0))
        return out

    def namespace_events(self, ns: str, *, limit: int = 50) -> list[dict[str, Any]]:
        """Every queue's events in the namespace, newest first (the dashboard's scaling log)."""
        with self.connector.transaction(write=False) as tx:
            rows = tx.all("namespace_events", ns=ns, limit=limit)
        return [{**r, "detail": json.loads(r["detail"])} for r in rows]

    def record_events(
        self, events: Sequence[tuple[str, str, str, dict[str, Any]]], now: float
    ) -> None:
        """(namespace, queue, kind, detail) events in one transaction: a controller tick's."""
        for ns, queue, kind, _ in events:
            check_name(ns, "namespace")
            check_name(queue)
            if not isinstance(kind, str) or not EVENT_KIND.fullmatch(kind):
                raise InvalidArgument(f"event kind must match {EVENT_KIND.pattern}, got {kind!r}")
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
        one transaction (sql: controller_*)."""
        return self.fleet()[0]

    def fleet(self) -> tuple[dict[str, list[Row]], list[ProviderInfo]]:
        """The controller's view of the world, one transaction: `fleet_view`'s rows and every
        namespace's provider configs."""
        with self.connector.transaction(write=False) as tx:
            rows = {
                "queues": tx.all("controller_queues"),
                "counts": tx.all("controller_counts"),
                "running": tx.all("controller_running_by_worker"),
                "workers": tx.all("controller_workers"),
                "shapes": tx.all("controller_shapes"),
            }
            providers = [provider_info(r) for r in tx.all("provider_list_all")]
        return rows, providers

    def metrics_view(self, stale_before: float) -> dict[str, list[Row]]:
        """Depth by state, workers by state and events by kind over every namespace, read in one
        transaction (a /metrics scrape; sql: metrics_*)."""
        with self.connector.transaction(write=False) as tx:
            return {
                "depth": tx.all("metrics_depth"),
                "workers": tx.all("metrics_workers", stale_before=stale_before),
                "events": tx.all("metrics_events"),
                "unschedulable": tx.all("unschedulable_counts"),
            }
