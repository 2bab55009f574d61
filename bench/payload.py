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
- a chain: 64 MiB put once, then 5 jobs one after the other, each reading it by its Ref and
  handing the same Ref on, beside a chain of one (the bytes move once).
Two hosts (the plane tier): 64 MiB put on host A and read on host B through the control plane,
beside a raw HTTP PUT+GET of the same bytes through the same server (`plane_tier`).
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
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

import dreamlake.lakeshore as dls
from dreamlake.lakeshore import spill

from .common import (
    REDIS_URL,
    Measurement,
    Settings,
    bin_path,
    clean_env,
    environ,
    log_dir,
    pct,
    process,
)
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
    try:
        with environ(**env):
            yield env
    finally:
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
            if cap == ARENA_CAP:
                out += _chain(s, q)
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


#: Jobs in the chain: each reads the array by its Ref and hands the same Ref to the next.
CHAIN = 5


def _chain(s: Settings, q: dls.SyncQueue) -> list[Measurement]:
    """A 64 MiB array put once, then passed along a chain of jobs by its Ref, beside the same
    with one job: the bytes move once however long the chain (each job maps and checks them)."""
    from .tasks import pass_on

    label = "64 MiB"

    def along(links: int) -> Callable[[np.ndarray], Any]:
        def call(a: np.ndarray) -> Any:
            ref = dls.put(a, durable=False)
            for _ in range(links):
                ref = q.call(dls.thunk(pass_on, ref), timeout=120)
            return dls.get(ref)

        return call

    out: list[Measurement] = []
    for links in (1, CHAIN):
        reps = [_timed(along(links), array(SIZES[label]), _calls(s, label)) for _ in range(s.reps)]
        mode = f"by Ref, host tier, a chain of {links} job{'s' if links > 1 else ''}"
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


# -- two hosts through the control plane (the plane tier) ----------------------------------------

PLANE_LABEL = "64 MiB"


def plane_tier(s: Settings) -> list[Measurement]:
    """64 MiB from host A to host B through the control plane (the plane tier), beside the raw
    HTTP floor of the same bytes through the same server.

    Two hosts simulated on this box: each its own host id, host tier and LAKESHORE_HOME, no
    storage configured, so all they share is the server. A (this process) `dls.put(a, via=
    plane)`s: the upload, which the server checks and fsyncs before the put returns; B (a child
    process) `dls.get`s the Ref: the download, into its own host tier, hash checked. The floor:
    the same object's bytes PUT, then GET into a buffer, with plain `http.client` against the
    same server's object route, so it pays the server's work (hash, write, fsync, read) and
    none of the SDK's (hashing, the host tiers' copies). The two alternate, transfer by
    transfer, so both meet the disk in the same state (its fsyncs are most of either).
    """
    data = array(SIZES[PLANE_LABEL])
    n = _calls(s, PLANE_LABEL)
    names = ("A put + B get", "A put (upload)", "B get (download)", "PUT+GET", "PUT", "GET")
    reps: dict[str, list[list[float]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="bench-plane-") as tmp:
        root = Path(tmp)
        with (
            server(root / "srv", str(root / "srv" / "lakeshore.db")) as (url, token, _),
            _host_a(root),
            dls.HttpDispatch(url, token=token, timeout_s=120) as plane,
            _host_b(root, url, token) as host_b,
        ):
            raw = _RawHttp(url, token, data)
            for rep in range(s.reps + 1):  # the first is a warm-up
                times: dict[str, list[float]] = {name: [] for name in names}
                for _ in range(n):
                    start = time.perf_counter()
                    ref = dls.put(data, via=plane)
                    put = (time.perf_counter() - start) * 1000
                    get = host_b(ref)
                    for name, ms in zip(names, (put + get, put, get, *raw.transfer()), strict=True):
                        times[name].append(ms)
                if rep:
                    for name in names:
                        reps[name].append(times[name])
    system, floor, dur = "lakeshore two hosts, plane tier", "floor: raw HTTP", "server fsync"
    return [
        *_rows(f"{system}: A put + B get", PLANE_LABEL, reps[names[0]], dur, "via the plane"),
        *_rows(f"{system}: A put (upload)", PLANE_LABEL, reps[names[1]], dur, "checked, fsynced"),
        *_rows(f"{system}: B get (download)", PLANE_LABEL, reps[names[2]], "", "into B's tier"),
        *_rows(f"{floor} PUT+GET, same server", PLANE_LABEL, reps["PUT+GET"], dur, _RawHttp.NOTE),
        *_rows(f"{floor} PUT, same server", PLANE_LABEL, reps["PUT"], dur, _RawHttp.NOTE),
        *_rows(f"{floor} GET, same server", PLANE_LABEL, reps["GET"], "", _RawHttp.NOTE),
    ]


@contextlib.contextmanager
def _host_a(root: Path) -> Iterator[None]:
    """This process as host A: its own host id, host tier and home; no storage, no plane."""
    home = root / "host-a"
    home.mkdir()
    with _host_tier(ARENA_CAP), environ(LAKESHORE_HOST_ID="host-a", LAKESHORE_HOME=str(home)):
        yield


@contextlib.contextmanager
def _host_b(root: Path, url: str, token: str) -> Iterator[Callable[[dls.Ref], float]]:
    """Host B: a child process that reads each Ref it is sent and answers the ms it took."""
    from dreamlake.lakeshore import codec

    home = root / "host-b"
    (home / "objects").mkdir(parents=True)
    env = clean_env(
        LAKESHORE_HOST_ID="host-b",
        LAKESHORE_HOME=str(home),
        LAKESHORE_OBJECTS=str(home / "objects"),
        LAKESHORE_OBJECTS_CAP=str(ARENA_CAP),
        LAKESHORE_URL=url,
        LAKESHORE_TOKEN=token,
    )
    argv = [sys.executable, "-c", "from bench.payload import plane_reader; plane_reader()"]
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    def read(ref: dls.Ref) -> float:
        stdin.write(codec.encode(ref).hex() + "\n")
        stdin.flush()
        answer = json.loads(stdout.readline())
        assert answer["size"] == ref.size, answer
        return float(answer["ms"])

    try:
        yield read
    finally:
        stdin.close()
        proc.wait(30)


def plane_reader() -> None:
    """Host B's loop: `dls.get` each Ref named on stdin (plane from LAKESHORE_URL)."""
    from dreamlake.lakeshore import codec

    for line in sys.stdin:
        ref = codec.decode(bytes.fromhex(line.strip()))
        start = time.perf_counter()
        value = dls.get(ref)
        ms = (time.perf_counter() - start) * 1000
        print(json.dumps({"ms": ms, "size": value.nbytes}), flush=True)
        del value


class _RawHttp:
    """The floor: an object's bytes PUT, then GET into a buffer, with plain http.client."""

    NOTE = "http.client, the object route"

    def __init__(self, url: str, token: str, data: np.ndarray) -> None:
        from urllib.parse import urlsplit

        from dreamlake.lakeshore.objects import layout

        header, body = layout.body_of(data)
        self.blob = layout.prefix_of(header) + bytes(body)
        self.headers = {
            "authorization": f"Bearer {token}",
            "content-type": "application/octet-stream",
            "x-lakeshore-size": str(body.nbytes),
            "x-lakeshore-digest": layout.digest_of(body),
        }
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "", parts.port
        self.into = bytearray(len(self.blob))

    def transfer(self) -> tuple[float, float, float]:
        """(PUT+GET, PUT, GET) ms of one transfer, under a new id."""
        import http.client

        from ulid import ULID

        path = f"/v1/namespaces/default/objects/{str(ULID()).lower()}"
        conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
        start = time.perf_counter()
        conn.request("PUT", path, body=self.blob, headers=self.headers)
        answer = conn.getresponse()
        answer.read()
        assert answer.status == 201, answer.status
        middle = time.perf_counter()
        conn.request("GET", path, headers={"authorization": self.headers["authorization"]})
        answer = conn.getresponse()
        got = answer.readinto(memoryview(self.into))
        assert got == len(self.blob), got
        end = time.perf_counter()
        conn.close()
        return (end - start) * 1000, (middle - start) * 1000, (end - middle) * 1000


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
