"""A schedule fires exactly once per slot however many processes fire it (issue 36, "Tests that
must pass"): three embedded processes and two HTTP replicas on one Postgres all run the firing
logic through ten minutes of a one-minute cron; then everything stops for five slots and
starts again, and `catchup=latest` fires one of them while `catchup=all` fires all five.

The minutes pass on a clock the test holds (LAKESHORE_SCHEDULE_CLOCK, a file every process
reads when it fires), so ten minutes take as long as the firers need to race for each slot.
The embedded processes run the embedded plane's sweep in a loop; each replica fires from its
own sweeper and from every claim, which a thread here keeps sending it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane.cron import CLOCK_ENV, slot_key
from dreamlake.lakeshore.plane.dispatch import open_store
from dreamlake.lakeshore.plane.schedules import ScheduleInfo
from tests.support import claiming
from tests.support.postgres import postgres_schema
from tests.support.server import LAUNCH, _wait_ready, free_port, server_env

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

NS = "default"  # the namespace the servers' bootstrap token opens
MINUTE = 60.0
#: The first slot: a fixed time, so the test reads the same whatever day it runs.
T0 = dt.datetime(2031, 1, 1, tzinfo=dt.timezone.utc).timestamp()

EMBEDDED = """
import sys
from dreamlake.lakeshore.plane.dispatch import LocalPlane
plane = LocalPlane(sys.argv[1], namespace=sys.argv[2])
print("ready", flush=True)
while True:  # what an embedded plane's reads do every second, as fast as it can: the race
    plane.store.sweep()
"""


class Clock:
    """The firing clock every process reads: a file of epoch seconds."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def set(self, t: float) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(repr(t))
        tmp.replace(self.path)  # a reader sees the old time or the new one, never half


@contextlib.contextmanager
def _firers(url: str, home: Path, clock: Clock) -> Iterator[None]:
    """Three embedded processes and two replicas, all firing, until the block ends; then
    every one is killed (SIGKILL: "stopped" is as abrupt as it gets)."""
    home.mkdir(exist_ok=True)
    env = {**server_env(home), CLOCK_ENV: str(clock.path)}
    stop = threading.Event()
    with contextlib.ExitStack() as stack:
        ports = [free_port() for _ in range(2)]
        logs = [home / f"server-{port}.log" for port in ports]
        servers = [
            _start(
                [sys.executable, "-c", LAUNCH, "server", "--port", str(port), "--store", url],
                env,
                log.open("wb"),
            )
            for port, log in zip(ports, logs, strict=True)
        ]
        for p in servers:
            stack.callback(_kill, p)
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        for server, replica, log in zip(servers, urls, logs, strict=True):
            _wait_ready(server, replica, log)
        # The embedded firers start once the servers are up: they spin, and would slow the
        # servers' start on a small box
        procs = [
            _start([sys.executable, "-c", EMBEDDED, url, NS], env, subprocess.PIPE)
            for _ in range(3)
        ]
        for p in procs:
            stack.callback(_kill, p)
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            assert line.strip() == b"ready", line + p.stdout.read()
        token = (home / "token").read_text().strip()
        threads = [
            threading.Thread(target=_claims, args=(replica, token, stop), daemon=True)
            for replica in urls
        ]
        for t in threads:
            t.start()
        try:
            yield
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=10)


def _start(args: list[str], env: dict[str, str], out: Any) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT)
    finally:
        if out is not subprocess.PIPE:
            out.close()  # the child holds its own copy


def _claims(url: str, token: str, stop: threading.Event) -> None:
    """Claims on an empty queue: each one fires what is due on the replica it reaches."""
    with dls.HttpDispatch(url, token=token, namespace=NS) as plane:
        while not stop.is_set():
            claiming.claim_many(plane, ["idle"], worker="hammer", limit=1)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def _until(url: str, check: str, done: object, timeout: float = 30.0) -> dict[str, ScheduleInfo]:
    """Poll the schedules until each one's `check` field is `done`; their rows."""
    store = open_store(url)
    try:
        deadline = time.monotonic() + timeout
        while True:
            rows = {s.name: s for s in store.schedules(NS)}
            if all(getattr(s, check) == done for s in rows.values()):
                return rows
            assert time.monotonic() < deadline, f"{check} never reached {done}: {rows}"
            time.sleep(0.01)
    finally:
        store.close()


def _keys(url: str) -> list[str]:
    store = open_store(url)
    try:
        rows = store.invocations(NS, queue="ticks", limit=1000)
    finally:
        store.close()
    return sorted(r.key or "" for r in rows)


def test_each_slot_fires_once_across_processes_and_downtime_follows_catchup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(tmp_path / "clock")
    clock.set(T0 - 30)
    monkeypatch.setenv(CLOCK_ENV, str(clock.path))  # this process makes the schedules
    home = tmp_path / "home"
    with postgres_schema("lakeshore_cron") as url:
        with dls.Dispatch(url, namespace=NS) as plane:
            for catchup in ("latest", "all"):
                dls.schedule(
                    f"every-{catchup}",
                    "* * * * *",
                    queue=dls.SyncQueue("ticks", dispatch=plane),
                    payload={"catchup": catchup},
                    catchup=catchup,
                )
        slots = [T0 + i * MINUTE for i in range(15)]
        # Ten minutes with five firers racing for every slot
        with _firers(url, home, clock):
            for slot in slots[:10]:
                clock.set(slot + 0.5)
                _until(url, "last_slot", slot)
        rows = _until(url, "next_fire_at", slots[10])
        assert {(s.fired, s.missed) for s in rows.values()} == {(10, 0)}
        # Nothing runs for five slots; then everything starts again
        clock.set(slots[14] + 30)
        with _firers(url, home, clock):
            rows = _until(url, "next_fire_at", slots[14] + MINUTE)
        assert (rows["every-latest"].fired, rows["every-latest"].missed) == (11, 4)
        assert (rows["every-all"].fired, rows["every-all"].missed) == (15, 0)
        expected = [slot_key("every-all", s) for s in slots] + [
            slot_key("every-latest", s) for s in [*slots[:10], slots[14]]
        ]
        assert _keys(url) == sorted(expected)
