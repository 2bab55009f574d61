"""3. Payload cost: a numpy array as payload and as result, through an echo, one worker.

The array crosses twice (producer to worker, worker to producer), one daemon on this box.
Lakeshore over HTTP (a `lakeshore server` on SQLite, one `lakeshore-daemon`), in five modes:
- by Ref, host tier: `dls.put(a, durable=False)`, the worker reads it (a view of the shared
  arena) and puts a copy back, as Ray's worker does: two copies in all, Ray's model.
- by Ref, durable: the same, each put also written through to file:// storage and fsynced.
- `q.call(a)`, spilled to the host tier (`LAKESHORE_SPILL_DURABLE=0`): the producer's put is the
  only copy; the worker's handler returns the view it was given, which is the same object.
- `q.call(a)`, spilled, durable (the default): the payload is written through and fsynced
  before submit returns.
- `q.call(a)` inline (1 MiB only; the inline limit raised above the array).
Peers with their default serializers: RQ (pickle through Redis) and Ray (its object store).
Celery and Dramatiq serialize with JSON by default, which cannot carry an ndarray: they are
listed as left out, with that reason.

Floors measured in the same run, same sizes: a memcpy into memory already mapped (what a put
into a warm arena cannot beat), `tobytes()`, and a write + fsync + read back of a new file on
the disk the durable tier uses (what one durable put cannot beat; by Ref, durable, makes two).
And zero-copy: the anonymous memory a worker process gains reading a 1 GiB Ref from the host
tier.
"""

from __future__ import annotations

import contextlib
import json
import os
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
#: Only the fastest paths (Lakeshore by Ref, Ray, the floors) are timed at 1 GiB.
HUGE = {"1 GiB": 1 << 30}
#: Round trips per repetition (64 MiB ones take a while on every system).
CALLS = {"1 MiB": 30, "64 MiB": 5, "1 GiB": 3}
QUICK_CALLS = {"1 MiB": 10, "64 MiB": 2, "1 GiB": 2}
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


#: The host tier's size in these runs: small enough that the arena fills during the first
#: repetition, so the figures are those of a box whose arena is in use (warm pages), not of its
#: first minutes; 3.5 GiB where the 1 GiB echo holds three objects at once (the input, the
#: copy the worker puts, and the previous result the producer still holds).
ARENA_CAP = 512 << 20
HUGE_ARENA_CAP = 3584 << 20


@contextlib.contextmanager
def _host_tier(cap: int) -> Iterator[dict[str, str]]:
    """A fresh arena in tmpfs for this process and the daemons (their env), removed after."""
    import shutil

    from dreamlake.lakeshore.objects.arena import close_arena

    root = Path("/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir())
    folder = Path(tempfile.mkdtemp(prefix="lakeshore-bench-objects-", dir=root))
    env = {"LAKESHORE_OBJECTS": str(folder), "LAKESHORE_OBJECTS_CAP": str(cap)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield env
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        close_arena(folder)
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def _lakeshore(home: Path, mode: str, cap: int = ARENA_CAP) -> Iterator[dls.SyncQueue]:
    """A server and one daemon; `mode` is "inline", "durable" or "host" (how spills are kept)."""
    storage = f"file://{home / 'storage'}"
    tier = contextlib.ExitStack()
    env = {"LAKESHORE_STORAGE": storage, "LAKESHORE_SPILL_DURABLE": str(int(mode != "host"))}
    env |= tier.enter_context(_host_tier(cap))
    if mode == "inline":
        env["LAKESHORE_INLINE_LIMIT"] = str(INLINE_ALL)
    spill.configure(
        inline_limit=INLINE_ALL if mode == "inline" else None,
        storage=storage,
        durable=mode != "host",
    )
    try:
        with (
            tier,
            server(home / "srv", str(home / "srv" / "lakeshore.db")) as (url, token, _),
            daemons(1, "payload", home=home, url=url, token=token, env=env),
            dls.HttpDispatch(url, token=token, timeout_s=120) as plane,
        ):
            q = dls.SyncQueue("payload", dispatch=plane)
            q.call(0, timeout=90)  # the daemon is up
            yield q
    finally:
        spill.configure()


MODES = {
    "host": "q.call, spilled to the host tier",
    "durable": "q.call, spilled, durable (default)",
    "inline": "q.call, inline",
}


def lakeshore(s: Settings) -> list[Measurement]:
    out: list[Measurement] = _lakeshore_refs(s)
    for mode, name in MODES.items():
        with (
            tempfile.TemporaryDirectory(prefix="bench-payload-") as tmp,
            _lakeshore(Path(tmp), mode) as q,
        ):
            for label, size in SIZES.items():
                if mode == "inline" and size >= 64 << 20:
                    continue  # above the server's body limit: spilled only
                data = array(size)
                reps = [
                    _timed(lambda a: q.call(a, timeout=120), data, _calls(s, label))
                    for _ in range(s.reps)
                ]
                out += _rows(f"lakeshore http (sqlite), {name}", label, reps, FULL, "one daemon")
    return out


def _lakeshore_refs(s: Settings) -> list[Measurement]:
    """The array travels by Ref (`dls.put`): the messages carry ~200 bytes, the worker maps the
    array from this box's host tier and puts a copy as its result; durable also writes both
    through to storage (fsynced) before each put returns."""
    out: list[Measurement] = []
    for cap, sizes in ((ARENA_CAP, SIZES), (HUGE_ARENA_CAP, HUGE)):
        with (
            tempfile.TemporaryDirectory(prefix="bench-payload-") as tmp,
            _lakeshore(Path(tmp), "durable", cap) as q,
        ):
            for durable in (False, True) if cap == ARENA_CAP else (False,):
                out += _by_ref(s, q, sizes, durable)
            if cap == HUGE_ARENA_CAP:
                out += _zero_copy(q)
    return out


def _by_ref(
    s: Settings, q: dls.SyncQueue, sizes: dict[str, int], durable: bool
) -> list[Measurement]:
    from .tasks import echo_ref

    mode = "by Ref, durable" if durable else "by Ref, host tier (durable=False)"

    def call(a: np.ndarray) -> Any:
        ref = dls.put(a, durable=durable)
        return dls.get(q.call(dls.thunk(echo_ref, ref, durable), timeout=120))

    out: list[Measurement] = []
    for label, size in sizes.items():
        reps = [_timed(call, array(size), _calls(s, label)) for _ in range(s.reps)]
        out += _rows(f"lakeshore http (sqlite), {mode}", label, reps, FULL, "one daemon")
    return out


def _zero_copy(q: dls.SyncQueue) -> list[Measurement]:
    """Anonymous memory a worker gains reading (and summing) a 1 GiB array by Ref."""
    from .tasks import anon_growth_reading

    ref = dls.put(array(1 << 30), durable=False)
    grew = q.call(dls.thunk(anon_growth_reading, ref), timeout=120)
    return [
        Measurement(
            "payload",
            "worker anon RSS growth, reading 1 GiB by Ref",
            "lakeshore http (sqlite), by Ref, host tier (durable=False)",
            [grew / (1 << 20)],
            "MiB",
            "",
            "a view of the arena, no copy",
            1,
        )
    ]


# -- floors ---------------------------------------------------------------------------------------


def floors(s: Settings) -> list[Measurement]:
    """What no system can beat on this box, per size: one copy, tobytes, a durable file."""
    out: list[Measurement] = []
    with tempfile.TemporaryDirectory(prefix="bench-payload-floor-") as tmp:
        for label, size in (SIZES | HUGE).items():
            out += _floors_at(s, label, array(size), Path(tmp))
    return out


def _floors_at(s: Settings, label: str, data: np.ndarray, folder: Path) -> list[Measurement]:
    target = np.empty_like(data)
    np.copyto(target, data)  # mapped and touched: the next copies land in warm memory
    n = _calls(s, label)
    copy = [_repeat(lambda: np.copyto(target, data), n) for _ in range(s.reps)]
    tob = [_repeat(data.tobytes, n) for _ in range(s.reps)]
    files = iter(range(1 << 30))
    disk = [
        _repeat(lambda: _write_fsync_read(folder / f"floor-{next(files)}.bin", data), n)
        for _ in range(s.reps)
    ]
    for path in folder.glob("floor-*.bin"):
        path.unlink()
    return [
        *_rows("floor: memcpy into mapped memory", label, copy, "", "np.copyto"),
        *_rows("floor: tobytes", label, tob, "", "a fresh buffer"),
        *_rows("floor: file write+fsync+read", label, disk, "fsync", "a new file each time"),
    ]


def _repeat(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def _write_fsync_read(path: Path, data: np.ndarray) -> None:
    """What a durable put costs at least: a new file (kept, as objects are kept: deleting each
    one at once lets the next reuse its pages, which no store of objects gets to do)."""
    with open(path, "wb") as f:
        f.write(memoryview(data).cast("B"))
        f.flush()
        os.fsync(f.fileno())
    with open(path, "rb") as f:
        back = np.empty_like(data)
        f.readinto(memoryview(back).cast("B"))


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
    sizes = SIZES | HUGE
    calls = {label: _calls(s, label) for label in sizes}
    data = ray_child("payload", json.dumps({"sizes": sizes, "calls": calls, "reps": s.reps}))
    out: list[Measurement] = []
    for label, reps in data.items():
        out += _rows("ray (local tasks)", label, reps, "in-memory object store", "object store")
    return out


def left_out() -> dict[str, str]:
    """Peers this suite cannot run, and why (shown under the table)."""
    reason = "its default serializer is JSON, which cannot carry a numpy array"
    return {"celery (payload)": reason, "dramatiq (payload)": reason}
