"""`map` throughput (issue 36): no-op items through `q.map` over HTTP (SQLite server), two
daemons with one slot each, items/s from the first submit to the last result read, one job per
item and 1,000 items a job (`chunk_size`). The peers' counterparts (Ray
`ray.get([f.remote(x) for x in xs])`, Celery `group` / `chunks`) are not in this suite yet.
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


def measure(s: Settings) -> list[Measurement]:
    plain_n = max(500, s.jobs // 5)  # a job and a result read each: a fifth of the fan-out's
    chunked_n = s.jobs * 10
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
    return [
        Measurement("map", "items/s, 1 item a job", label, plain, "items/s", dur, note, plain_n),
        Measurement(
            "map", f"items/s, {CHUNK} items a job", label, chunked, "items/s", dur, note, chunked_n
        ),
    ]


def _rate(q: dls.SyncQueue, n: int, chunk: int | None) -> float:
    start = time.perf_counter()
    done = sum(1 for _ in q.map(noop, range(n), chunk_size=chunk))
    assert done == n
    return n / (time.perf_counter() - start)
