"""3. Payload cost: a numpy array as payload and as result, through an echo, one worker.

`q.call(array)` where the worker returns its argument, so the array crosses twice. Lakeshore
over HTTP (a `lakeshore server` on SQLite, one `lakeshore-daemon` running `bench.tasks:noop`):
inline (the inline limit raised above the array, so the bytes ride in the requests and the
row) and spilled (the default: above 256 KiB the value goes to storage, here a file:// folder
on this box, and the row carries a ref). 64 MiB cannot ride inline over HTTP (the server's body
limit is 64 MiB): spilled only. Peers with their default serializers: RQ (pickle through Redis)
and Ray (its object store). Celery and Dramatiq serialize with JSON by default, which cannot
carry an ndarray: they are listed as left out, with that reason.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

import dreamlake.lakeshore as dls
from dreamlake.lakeshore import spill

from .common import REDIS_URL, Measurement, Settings, bin_path, clean_env, log_dir, pct, process
from .lakeshore_runs import FULL, daemons, server
from .peers.runs import ray_child

SIZES = {"1 MiB": 1 << 20, "64 MiB": 64 << 20}
#: Round trips per repetition (64 MiB ones take a while on every system).
CALLS = {"1 MiB": 30, "64 MiB": 5}
QUICK_CALLS = {"1 MiB": 10, "64 MiB": 2}
#: The inline limit for the "inline" runs: above any array here.
INLINE_ALL = 256 << 20


def array(size: int) -> np.ndarray:
    return np.arange(size // 4, dtype=np.float32)


def _calls(s: Settings, label: str) -> int:
    return (QUICK_CALLS if s.quick else CALLS)[label]


#: A repetition stops after this long once it has two round trips (a slow peer's 64 MiB call
#: takes many seconds; two of them are enough for its median).
REP_CAP_S = 10.0


def _timed(call: Callable[[np.ndarray], Any], data: np.ndarray, n: int) -> list[float]:
    """Latencies in ms of up to n echo round trips, after one warm-up; checks what came back."""
    back = call(data)
    assert np.array_equal(back, data), "the echo changed the array"
    out: list[float] = []
    deadline = time.monotonic() + REP_CAP_S
    for _ in range(n):
        start = time.perf_counter()
        call(data)
        out.append((time.perf_counter() - start) * 1000)
        if len(out) >= 2 and time.monotonic() > deadline:
            break
    return out


def _rows(
    system: str, label: str, reps: list[list[float]], dur: str, note: str
) -> list[Measurement]:
    n = min(len(r) for r in reps)
    return [
        Measurement(
            "payload", f"p50, {label}", system, [pct(r, 50) for r in reps], "ms", dur, note, n
        )
    ]


# -- Lakeshore ------------------------------------------------------------------------------------


@contextlib.contextmanager
def _lakeshore(home: Path, inline: bool) -> Iterator[dls.SyncQueue]:
    storage = f"file://{home / 'storage'}"
    env = {"LAKESHORE_STORAGE": storage}
    if inline:
        env["LAKESHORE_INLINE_LIMIT"] = str(INLINE_ALL)
    spill.configure(inline_limit=INLINE_ALL if inline else None, storage=storage)
    try:
        with (
            server(home / "srv", str(home / "srv" / "lakeshore.db")) as (url, token, _),
            daemons(1, "payload", home=home, url=url, token=token, env=env),
            dls.HttpDispatch(url, token=token, timeout_s=120) as plane,
        ):
            q = dls.SyncQueue("payload", dispatch=plane)
            q.call(0, timeout=90)  # the daemon is up
            yield q
    finally:
        spill.configure()


def lakeshore(s: Settings) -> list[Measurement]:
    out: list[Measurement] = _lakeshore_refs(s)
    for inline in (True, False):
        mode = "inline" if inline else "spilled (file:// storage)"
        with (
            tempfile.TemporaryDirectory(prefix="bench-payload-") as tmp,
            _lakeshore(Path(tmp), inline) as q,
        ):
            for label, size in SIZES.items():
                if inline and size >= 64 << 20:
                    continue  # above the server's body limit: spilled only
                data = array(size)
                reps = [
                    _timed(lambda a: q.call(a, timeout=120), data, _calls(s, label))
                    for _ in range(s.reps)
                ]
                out += _rows(f"lakeshore http (sqlite), {mode}", label, reps, FULL, "one daemon")
    return out


def _lakeshore_refs(s: Settings) -> list[Measurement]:
    """The array travels by Ref (`dls.put`): the messages carry ~200 bytes, the worker maps the
    array from this box's host tier and puts its result there; durable also writes both through
    to storage (fsynced) before each put returns."""
    from .tasks import echo_ref

    out: list[Measurement] = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-payload-") as tmp,
        _lakeshore(Path(tmp), inline=False) as q,
    ):
        for durable in (False, True):
            mode = "by Ref, durable" if durable else "by Ref, host tier (durable=False)"

            def call(a: np.ndarray, durable: bool = durable) -> Any:
                ref = dls.put(a, durable=durable)
                return dls.get(q.call(dls.thunk(echo_ref, ref, durable), timeout=120))

            for label, size in SIZES.items():
                data = array(size)
                reps = [_timed(call, data, _calls(s, label)) for _ in range(s.reps)]
                out += _rows(f"lakeshore http (sqlite), {mode}", label, reps, FULL, "one daemon")
    return out


# -- peers ----------------------------------------------------------------------------------------


def rq(s: Settings) -> list[Measurement]:
    from redis import Redis
    from rq import Queue

    from .peers.rq_tasks import echo

    conn = Redis.from_url(REDIS_URL)
    conn.flushdb()
    queue = Queue("payload", connection=conn)
    argv = [bin_path("rq"), "worker", "-u", REDIS_URL, "-w", "rq.worker.SimpleWorker", "-q"]
    argv.append("payload")

    def call(a: np.ndarray) -> Any:
        job = queue.enqueue(echo, a)
        res = job.latest_result(timeout=120)
        assert res is not None and res.type == res.Type.SUCCESSFUL, res
        return res.return_value

    out: list[Measurement] = []
    with process(argv, log_dir() / "rq-payload.log", clean_env(BENCH_REDIS_URL=REDIS_URL)):
        for label, size in SIZES.items():
            data = array(size)
            reps = [_timed(call, data, _calls(s, label)) for _ in range(s.reps)]
            out += _rows("rq (SimpleWorker)", label, reps, "Redis, no persistence", "pickle")
    conn.flushdb()
    return out


def ray(s: Settings) -> list[Measurement]:
    """In a child interpreter, as the RPC figures are."""
    calls = {label: _calls(s, label) for label in SIZES}
    data = ray_child("payload", json.dumps({"sizes": SIZES, "calls": calls, "reps": s.reps}))
    out: list[Measurement] = []
    for label, reps in data.items():
        out += _rows("ray (local tasks)", label, reps, "in-memory object store", "object store")
    return out


def left_out() -> dict[str, str]:
    """Peers this suite cannot run, and why (shown under the table)."""
    reason = "its default serializer is JSON, which cannot carry a numpy array"
    return {"celery (payload)": reason, "dramatiq (payload)": reason}
