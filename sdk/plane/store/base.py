"""The connector, the waker and the small writes every part shares (a queue row, an event)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from dreamlake.lakeshore.errors import NotFound
from dreamlake.lakeshore.ids import (
    new_id as new_id,  # minted outside the store, so a topic needs no store
)
from dreamlake.lakeshore.plane.connector import Connector, Row, Transaction
from dreamlake.lakeshore.types import topic_channel as topic_channel  # the store's export

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

R = TypeVar("R")


class StoreBase:
    def __init__(self, connector: Connector) -> None:
        self.connector = connector
        self.waker = connector.waker
        #: Set by whoever holds the server's secret (`lakeshore server`, a keyed Dispatch):
        #: each accepted payload is then signed (sdk/signing.py). Never stored in the store.
        self.signing_key: bytes | None = None
        self._swept_at = 0.0
        #: When this process last named unschedulable jobs (store/schedulable.py).
        self._judged_at = 0.0
        #: Where the dependencies safety net's next batch of waiting jobs starts (its sweep).
        self._waiting_from = ""

    def close(self) -> None:
        self.connector.close()

    def integrity_problem(self, *, check: bool = False) -> str | None:
        """What is wrong with the database file, if it is known to be damaged; `check` runs the
        dialect's quick integrity check first (SQLite's quick_check; Postgres: nothing to do)."""
        return self.connector.quick_check() if check else self.connector.problem

    def _named(
        self, statement: str, what: str, record: Callable[[Row], R], ns: str, **key: str
    ) -> R:
        """The one `what` that `statement` reads by `key` (its name, a worker's ref) in `ns`, as
        `record` makes it; NotFound naming the two when there is none."""
        with self.connector.transaction(write=False) as tx:
            row = tx.one(statement, ns=ns, **key)
        if row is None:
            (name,) = key.values()
            raise NotFound(f"unknown {what} '{name}' in namespace '{ns}'")
        return record(row)

    def ping(self) -> bool:
        """A round trip to the database: /readyz."""
        with self.connector.transaction(write=False) as tx:
            return tx.one("ping") is not None

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

    def _append(
        self,
        tx: Transaction,
        channel: str,
        kind: str,
        value: bytes | None,
        now: float,
        post_id: str | None = None,
        *,
        rank: int = 0,
    ) -> int:
        """Append a frame inside `tx` (a settle writes its ERROR frame in its own commit);
        `rank`: a gang's part whose output it is (0: the job's own)."""
        row = tx.one(
            "append_frame",
            channel=channel,
            kind=kind,
            value=value,
            now=now,
            post_id=post_id,
            rank=rank,
        )
        assert row is not None
        return int(row["seq"])
