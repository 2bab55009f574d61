"""`map` throughput (issue 36): no-op items through `q.map` over HTTP (SQLite server), two
daemons with one slot each, items/s from the first submit to the last result read, one job per
item and 1,000 items a job (`chunk_size`). The peers' counterparts run in the same suite at the
same two sizes (bench/peers/runs.py): Ray `ray.get([f.remote(x) for x in xs])` on two CPUs (one
task per item at both sizes: Ray has no chunking of its own) and Celery `group` / `chunks` on
prefork -c 2 with Redis.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import dreamlake.lakeshore as dls

from .common import Measurement, Settings
from .lakeshore_runs import _plane, _plane_for, _ready, daemons
from .tasks import noop

QUEUE = "map"
CHUNK = 1000


def sizes(s: Settings) -> tuple[int, int]:
    """(items of the one-item-a-job run, items of the chunked run): a job and a result read
    each is a fifth of the fan-out's count; chunks carry ten times the fan-out's."""
    return max(500, s.jobs // 5), s.jobs * 10


def rows(
    system: str,
    durability: str,
    note: str,
    plain: list[float],
    chunked: list[float],
    plain_n: int,
    chunked_n: int,
) -> list[Measurement]:
    """The suite's two figures of one system, named alike so the table sets them side by side."""
    return [
        Measurement(
            "map", "items/s, 1 item a job", system, plain, "items/s", durability, note, plain_n
        ),
        Measurement(
            "map",
            f"items/s, {CHUNK} items a job",
            system,
            chunked,
            "items/s",
            durability,
            note,
            chunked_n,
        ),
    ]


def measure(s: Settings) -> list[Measurement]:
    plain_n, chunked_n = sizes(s)
    with (
        tempfile.TemporaryDirectory(prefix="bench-map-") as tmp,
        _plane_for("http-sqlite", Path(tmp), False) as (url, token, store, dur, label),
        daemons(2, QUEUE, home=Path(tmp), url=url, token=token, store=store),
    ):
        p = _plane(url, token, store, False)
        try:
            q = dls.SyncQueue(QUEUE, dispatch=p)
            _ready(q)
            plain, chunked = [], []
            for _ in range(s.reps):
                plain.append(_rate(q, plain_n, None))
                chunked.append(_rate(q, chunked_n, CHUNK))
        finally:
            p.close()
    note = "2 daemons x 1 slot; items/s from first submit to last result"
    return rows(label, dur, note, plain, chunked, plain_n, chunked_n)


def _rate(q: dls.SyncQueue, n: int, chunk: int | None) -> float:
    start = time.perf_counter()
    done = sum(1 for _ in q.map(noop, range(n), chunk_size=chunk))
    assert done == n
    return n / (time.perf_counter() - start)
