"""The store's own share of a `q.call`: its two transactions, in one thread, nothing else.

Over HTTP on SQLite the server runs two transactions per call: the submit, which hands the job
to the daemon's waiting claim in the same transaction and owes its fsync (`sync_later`), and the
worker's ack, which settles the result durably (its fsync flushes the submit's frames too) and
claims again, finding nothing. Here the same two `SqlStore` calls run back to back on a file
made the way the server makes it, at FULL, with no server, no sockets, no worker process and no
wake-up. The call's p50 minus this is what the transport and the processes around the store
cost; this minus the durable floor is what the SQL beyond the bare commit costs.
"""

from __future__ import annotations

import secrets
import tempfile
import time
from pathlib import Path

from dreamlake.lakeshore.plane.sqlite import SqliteConnector
from dreamlake.lakeshore.plane.store import SqlStore
from dreamlake.lakeshore.plane.store.base import new_id
from dreamlake.lakeshore.types import Ack, ClaimArgs, SubmitRequest

from .common import Measurement, Settings, pct
from .lakeshore_runs import FULL

SYSTEM = "lakeshore store alone"
QUEUE = "rpc"
NAMESPACE = "default"
#: Calls before timing, as the rpc suite warms its calls (and the WAL grows to its length).
WARMUP = 1500


def _calls(folder: Path, n: int) -> list[float]:
    store = SqlStore(SqliteConnector(str(folder / f"store-{time.monotonic_ns()}.db")))
    store.signing_key = secrets.token_bytes(32)  # the server signs every payload it stores
    claimer = ClaimArgs([QUEUE], worker="bench-store", lease_s=60.0)
    payload = b"\x00"  # what a no-op's encoded argument is near enough
    try:
        out = []
        for i in range(WARMUP + n):
            # The producer mints the id (as the SDK does), so the submit reads the queue row
            # with its check that the id is new, as the server's does.
            request = SubmitRequest(payload, id=new_id())
            start = time.perf_counter()
            _, (claims,) = store.submit_handing(
                NAMESPACE, QUEUE, [request], [claimer], sync_later=True
            )
            (claim,) = claims
            errors, _ = store.ack_and_claim(
                NAMESPACE, [Ack(claim.id, claim.lease, payload)], claimer
            )
            if errors != [None]:
                raise RuntimeError(f"the ack was refused: {errors}")
            if i >= WARMUP:
                out.append((time.perf_counter() - start) * 1000)
        return out
    finally:
        store.connector.close()


def measure(s: Settings) -> list[Measurement]:
    n = s.calls // 4 if s.quick else s.calls
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
        reps = [_calls(Path(tmp), n) for _ in range(s.reps)]
    return [
        Measurement(
            "rpc",
            "p50",
            SYSTEM,
            [pct(r, 50) for r in reps],
            "ms",
            FULL,
            "a call's 2 transactions, one thread: no server, no worker",
            n,
        )
    ]
