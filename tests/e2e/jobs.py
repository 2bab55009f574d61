"""Job bodies for the daemon tests, importable by reference in the daemon's child processes.

cloudpickle pickles module-level functions of an importable module by name, so the daemon's
child must be able to import this module: the tests put its folder on the daemon's PYTHONPATH.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any


def square(x: int) -> int:
    return x * x


def count_up(n: int) -> Iterator[int]:
    yield from range(n)
    return n


async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


async def async_ticks(n: int) -> AsyncIterator[str]:
    for i in range(n):
        await asyncio.sleep(0)
        yield f"tick-{i}"


def boom(message: str) -> None:
    raise ValueError(message)


def size_of(data: bytes) -> int:
    return len(data)


def noop() -> None:
    return None


def environment(*names: str) -> dict[str, str | None]:
    return {name: os.environ.get(name) for name in names}


def pid() -> int:
    return os.getpid()


def sleep_for(seconds: float, marker: str | None = None) -> str:
    """Sleep; touch `marker` first so a test knows the body is running (no guessing)."""
    if marker:
        Path(marker).write_text(str(os.getpid()))
    time.sleep(seconds)
    return "slept"


def stubborn(marker: str) -> str:
    """Ignore SIGTERM, so only SIGKILL after the grace ends it."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    Path(marker).write_text(str(os.getpid()))
    time.sleep(600)
    return "unreachable"


def segfault() -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


def hard_exit() -> None:
    os._exit(3)


def once_then_fast(marker: str, seconds: float) -> str:
    """The first attempt (no marker yet) runs long; any later attempt returns at once.

    The marker holds the pid of the first attempt, so a test can check that it is gone.
    """
    path = Path(marker)
    if path.exists():
        return "second run"
    path.write_text(str(os.getpid()))
    time.sleep(seconds)
    return "first run"


def wait_for_peers(directory: str, peers: int, timeout_s: float = 30.0) -> dict[str, Any]:
    """Rendezvous: returns only once `peers` jobs run at the same time (proves two slots)."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / str(os.getpid())).touch()
    deadline = time.monotonic() + timeout_s
    while len(list(folder.iterdir())) < peers:
        if time.monotonic() > deadline:
            raise TimeoutError("peers never arrived")
        time.sleep(0.02)
    return {"pid": os.getpid(), "cuda": os.environ.get("CUDA_VISIBLE_DEVICES")}


def handle(value: Any) -> Any:
    """A --handler: plain payloads in, results (and for lists, frames) out."""
    if isinstance(value, list):
        return _each(value)
    return {"handled": value}


def _each(items: list[Any]) -> Iterator[Any]:
    yield from items
    return len(items)


def slow_lines(n: int) -> Iterator[int]:
    for i in range(n):
        time.sleep(0.01)
        yield i


def double_ref(ref: Any) -> Any:
    """Read an object by its Ref and hand back a Ref to twice it: the bytes never ride a message."""
    import dreamlake.lakeshore as dls

    return dls.put(dls.get(ref) * 2, durable=False)


def where_am_i() -> Any:
    """What `dls.run` says about the running job (id, attempt, queue)."""
    import dreamlake.lakeshore as dls

    return {"id": dls.run.id, "attempt": dls.run.attempt, "queue": dls.run.queue}


def host_that_read(ref: Any) -> dict[str, Any]:
    """Read an object by its Ref; say which host read it and the sum it found (locality)."""
    import dreamlake.lakeshore as dls
    from dreamlake.lakeshore import objects

    return {"host": objects.host_id(), "sum": float(dls.get(ref).sum())}


def credentials_in_reach() -> dict[str, Any]:
    """What a job finds of credentials where any code finds them: its environment, the first
    environment of its process, and its daemon's (None when the kernel refuses the read)."""
    try:
        parent: str | None = Path(f"/proc/{os.getppid()}/environ").read_bytes().decode("latin-1")
    except OSError:
        parent = None
    return {
        "env": {k: v for k, v in os.environ.items() if "TOKEN" in k or "SIGNING" in k},
        "proc_self_environ": Path("/proc/self/environ").read_bytes().decode("latin-1"),
        "daemon_environ": parent,
    }


def act_as_a_worker(queue: str, follow_up: int) -> dict[str, Any]:
    """With the token the job was given (from its environment, as the SDK reads it), try what
    its worker does, then what a job may: say what each met."""
    import dreamlake.lakeshore as dls
    from dreamlake.lakeshore.errors import DispatchError
    from dreamlake.lakeshore.plane import claim
    from dreamlake.lakeshore.types import ClaimArgs

    me = dls.run.id
    out: dict[str, Any] = {"token": os.environ.get("LAKESHORE_TOKEN")}
    with dls.HttpDispatch() as plane:
        attempts = {
            "claim": lambda: claim(plane, ClaimArgs([queue], "thief")),
            "ack": lambda: plane.ack(me, "a-guessed-lease", None),
            "renew": lambda: plane.renew(["a-guessed-lease"], lease_s=60),
            "register": lambda: plane.register_worker("thief", queues=[queue]),
            "submit": lambda: dls.SyncQueue(queue, dispatch=plane).submit(
                dls.thunk(square, follow_up)
            ),
            "put": lambda: str(dls.put(b"x" * 300_000, via=plane).id),
        }
        for name, attempt in attempts.items():
            try:
                out[name] = ("ok", attempt())
            except DispatchError as exc:
                out[name] = (type(exc).__name__, str(exc))
    return out


def big_result(size: int) -> bytes:
    """More than the inline limit: the job's process spills it, through the plane tier when no
    storage is configured, with the job's own token."""
    return b"r" * size


def placed(directory: str | None = None, peers: int = 1) -> dict[str, Any]:
    """The GPUs this job's process sees and `dls.run.gpus`; with `directory`, first wait until
    `peers` jobs run at once (proves they overlap)."""
    import dreamlake.lakeshore as dls

    if directory is not None:
        wait_for_peers(directory, peers)
    return {
        "pid": os.getpid(),
        "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "gpus": dls.run.gpus,
    }


def allocate_past_rlimit(headroom_mb: int = 256) -> int:
    """Lower this process's RLIMIT_AS to what it maps now plus `headroom_mb`, then allocate
    past it: a MemoryError, as a job out of host memory under a limit meets it. The limit is
    put back before the error leaves (the daemon's child stays warm for the next job)."""
    import resource

    mapped_kb = next(
        int(line.split()[1])
        for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("VmSize:")
    )
    old = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, ((mapped_kb * 1024) + (headroom_mb << 20), old[1]))
    try:
        return len(bytearray(4 * headroom_mb << 20))
    finally:
        resource.setrlimit(resource.RLIMIT_AS, old)


def sigkill_self(counter: str | None = None) -> None:
    """Die by SIGKILL, as the OOM killer ends a process; with `counter` (a file the daemon
    reads as an OOM-kill counter: daemon/oom.py's seam), move it first, as the kernel does."""
    if counter is not None:
        path = Path(counter)
        path.write_text(str(int(path.read_text()) + 1))
    os.kill(os.getpid(), signal.SIGKILL)


def hold_until(path: str, timeout_s: float = 60.0) -> str:
    """Run until the file at `path` exists (the test lets each job end when it chooses)."""
    deadline = time.monotonic() + timeout_s
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.02)
    return path


def hold_gpu(directory: str, name: str, timeout_s: float = 60.0) -> dict[str, Any]:
    """Start a grandchild (as a DataLoader worker would be), write both pids to
    `directory/name.json`, then hold until `directory/release` exists; on a later attempt
    return at once. Returns what the job's process saw."""
    import json
    import subprocess
    import sys

    import dreamlake.lakeshore as dls

    seen = {"attempt": dls.run.attempt, "cuda": os.environ.get("CUDA_VISIBLE_DEVICES")}
    if dls.run.attempt > 1:
        return seen
    folder = Path(directory)
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        (folder / f"{name}.json").write_text(json.dumps({"pid": os.getpid(), "child": helper.pid}))
        deadline = time.monotonic() + timeout_s
        while not (folder / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        helper.kill()
        helper.wait()
    return seen
