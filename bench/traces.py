"""Which of Lakeshore's files a claim and a run timeout pass through (issue 38's two traces).

    python -m bench.traces            # from a checkout, with its package installed

A reader who changes how a claim picks a job, or how a run timeout ends one, follows the code
through every file it runs in. This counts those files by running the path, not by reading it:
a profile hook records the file of every Lakeshore function called while the traced step runs
(module bodies excluded: an import is not the path). Every step runs once before it is traced,
so lazy imports and first-use set-up are not counted either. The same script runs on an older
checkout to give the "before" figure.

- claim, embedded: `SyncQueue.claim()` on `Dispatch(":memory:")`;
- claim, HTTP: the same over a real server run in this process (uvicorn in a thread), so the
  client's and the server's files count together, as a reader opens both;
- run timeout, daemon: the slot thread of an in-process `Daemon` from the moment it starts a
  job whose `timeout_s` is shorter than its run until that job is settled as `timeout`.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_SKIP = {ROOT / "bench", ROOT / "tests", ROOT / ".venv"}


def _lakeshore(path: Path) -> bool:
    return path.is_relative_to(ROOT) and not any(path.is_relative_to(s) for s in _SKIP)


#: Where a path ends: a statement reaching the store, a request leaving the client.
_LEAVES = ("sdk/plane/sqlite.py", "sdk/plane/http11.py")


class Trace:
    """Files of Lakeshore functions called while `on` is set, in the threads `only` admits:
    all of them (`files`), and those on the call chain down to a leaf (`chain`): a statement
    reaching SQLite, a request leaving the client, or, for a run timeout, a deadline check."""

    def __init__(self) -> None:
        self.files: set[str] = set()
        self.chain: set[str] = set()
        self.on = False
        self.only: Callable[[str], bool] = lambda name: True

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.on or event != "call" or frame.f_code.co_name == "<module>":
            return
        path = Path(frame.f_code.co_filename)
        if not _lakeshore(path) or not self.only(threading.current_thread().name):
            return
        here = str(path.relative_to(ROOT))
        self.files.add(here)
        name = frame.f_code.co_name
        if here in _LEAVES or "timeout" in name or "timed_out" in name or "deadline" in name:
            caller: FrameType | None = frame
            while caller is not None:
                if _lakeshore(Path(caller.f_code.co_filename)):
                    self.chain.add(str(Path(caller.f_code.co_filename).relative_to(ROOT)))
                caller = caller.f_back

    @contextmanager
    def recording(
        self, only: Callable[[str], bool] = lambda name: True
    ) -> Iterator[tuple[set[str], set[str]]]:
        self.files, self.chain, self.only, self.on = set(), set(), only, True
        try:
            yield self.files, self.chain
        finally:
            self.on = False


def claim_embedded(trace: Trace) -> tuple[set[str], set[str]]:
    import dreamlake.lakeshore as dls

    with dls.Dispatch(":memory:") as plane:
        q = dls.SyncQueue("traced", dispatch=plane)
        for _ in range(2):  # the first one warms up
            q.submit({"x": 1})
            with trace.recording() as traced:
                job = q.claim(wait=0)
            assert job is not None
    return traced


def claim_http(trace: Trace, home: Path) -> tuple[set[str], set[str]]:
    import uvicorn

    import dreamlake.lakeshore as dls
    from dreamlake.lakeshore.plane.auth import bootstrap
    from dreamlake.lakeshore.plane.dispatch import open_store
    from dreamlake.lakeshore.server.app import create_app

    store = open_store(str(home / "plane.db"))
    made = bootstrap(store, home)
    assert made is not None
    token = made[0]
    config = uvicorn.Config(create_app(store), host="127.0.0.1", port=0, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the traced server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        with dls.HttpDispatch(f"http://127.0.0.1:{port}", token=token) as plane:
            q = dls.SyncQueue("traced", dispatch=plane)
            for _ in range(2):
                q.submit({"x": 1})
                with trace.recording() as traced:
                    job = q.claim(wait=0)
                assert job is not None
    finally:
        server.should_exit = True
        thread.join(10)
    return traced


def _sleep_past_the_timeout() -> None:
    time.sleep(30)


def timeout_daemon(trace: Trace, home: Path) -> tuple[set[str], set[str]]:
    import dreamlake.lakeshore as dls
    from dreamlake.lakeshore.daemon.worker import Daemon, DaemonConfig

    store = str(home / "daemon.db")
    with dls.Dispatch(store) as plane:
        q = dls.SyncQueue("timed", dispatch=plane)
        for _ in range(2):
            inv = q.submit(dls.thunk(_sleep_past_the_timeout), timeout_s=0.5, max_attempts=1)
            config = DaemonConfig(name="traced", queues=("timed",), burst=True, kill_grace_s=0.2)
            slot_threads = lambda name: name.startswith("lakeshore-slot")  # noqa: E731
            with trace.recording(only=slot_threads) as traced:
                Daemon(plane, config).run(install_signals=False)
            state = q.status(inv)
            assert getattr(state, "state", state) == "timeout", state
    return traced


def main() -> None:
    os.environ.setdefault("LAKESHORE_HOME", tempfile.mkdtemp(prefix="lakeshore-traces-"))
    home = Path(os.environ["LAKESHORE_HOME"])
    trace = Trace()
    threading.setprofile(trace.hook)  # every thread started from here on
    sys.setprofile(trace.hook)
    sys.path.insert(0, str(ROOT))  # the thunk's module, for the daemon's child
    import logging

    logging.disable(logging.INFO)  # the in-process daemon's lines are not the figure
    results = {
        "claim, embedded": claim_embedded(trace),
        "claim, HTTP (client and server)": claim_http(trace, home),
        "run timeout, daemon slot": timeout_daemon(trace, home),
    }
    sys.setprofile(None)
    threading.setprofile(None)  # type: ignore[arg-type]
    for name, (files, chain) in results.items():
        print(f"{name}: {len(chain)} files on the call chain, {len(files)} touched")
        for f in sorted(files):
            print(f"    {'chain' if f in chain else '     '}  {f}")


if __name__ == "__main__":
    main()
