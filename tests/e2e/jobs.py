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
