"""A server fires cron slots across DST where the docs place them (issue 45, item 11).

A real `lakeshore server` fires on a clock the test holds (LAKESHORE_SCHEDULE_CLOCK): the test
sets it to each slot the independent reference (tests/support/cron_reference.py) expects and
waits for the server's firing, its sweeper or a claim's, to submit the job keyed
`schedule:<name>:<slot>`. Schedules are made over HTTP, so the server also decides each one's
first slot from its clock. Four spans, in time order: the skipped hour in Berlin, Lord Howe's
half-hour gap, a late firing in Berlin's repeated hour, and a schedule made just after a gap.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane.cron import CLOCK_ENV, slot_key
from dreamlake.lakeshore.plane.schedules import ScheduleInfo
from tests.support import claiming
from tests.support.cron_reference import expected_slots
from tests.support.server import LAUNCH, _stop, _wait_ready, free_port, server_env

pytestmark = pytest.mark.slow

NS = "default"  # the namespace the server's bootstrap token opens
QUEUE = "ticks"
UTC = dt.timezone.utc
#: How long one slot's firing may take: the server's sweeper runs every second, and a claim
#: fires what is due too.
FIRE_TIMEOUT_S = 15.0


def _utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> float:
    return dt.datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()


class Clock:
    """The server's firing clock: a file of epoch seconds, replaced whole."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def set(self, t: float) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(repr(t))
        tmp.replace(self.path)


@contextlib.contextmanager
def _server(home: Path, clock: Clock) -> Iterator[dls.HttpDispatch]:
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = home / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", LAUNCH, "server", "--port", str(port)],
            env={**server_env(home), CLOCK_ENV: str(clock.path)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(proc, url, log)
        token = (home / "token").read_text().strip()
        with dls.HttpDispatch(url, token=token, namespace=NS) as plane:
            yield plane
    finally:
        _stop(proc)


def _until(plane: dls.HttpDispatch, name: str, field: str, value: object) -> ScheduleInfo:
    """The schedule once its `field` is `value`; each poll sends a claim, which fires what is
    due on the server (its sweeper fires it within a second anyway)."""
    deadline = time.monotonic() + FIRE_TIMEOUT_S
    while True:
        claiming.claim_many(plane, ["idle"], worker="poke", limit=1)
        row = plane.schedule(name)
        if getattr(row, field) == value:
            return row
        assert time.monotonic() < deadline, f"{name}: {field} never became {value}: {row}"
        time.sleep(0.02)


def _keys(plane: dls.HttpDispatch, name: str) -> list[str]:
    rows = plane.invocations(queue=QUEUE, limit=1000)
    return sorted(r.key for r in rows if r.key and r.key.startswith(f"schedule:{name}:"))


def _fire_through(
    plane: dls.HttpDispatch, clock: Clock, crons: dict[str, tuple[str, str]], until: float
) -> None:
    """Make each schedule now, step the clock to every slot the reference expects up to
    `until`, and check that each fired exactly its slots, none missed; then remove them."""
    now = float(clock.path.read_text())
    want = {
        name: expected_slots(cron, tz, int(now), int(until)) for name, (cron, tz) in crons.items()
    }
    for name, (cron, tz) in crons.items():
        made = dls.schedule(name, cron, queue=dls.SyncQueue(QUEUE, dispatch=plane), tz=tz)
        assert made.next_fire_at == want[name][0], (name, made)
    for slot in sorted({s for slots in want.values() for s in slots}):
        clock.set(slot + 0.5)
        for name, slots in want.items():
            if slot in slots:
                _until(plane, name, "last_slot", slot)
    for name, slots in want.items():
        row = plane.schedule(name)
        assert (row.fired, row.missed) == (len(slots), 0), row
        assert _keys(plane, name) == sorted(slot_key(name, s) for s in slots)
        plane.delete_schedule(name)


def test_a_server_fires_every_slot_across_dst_as_the_reference_places_it(tmp_path: Path) -> None:
    clock = Clock(tmp_path / "clock")
    clock.set(_utc(2021, 3, 28, 0, 10))  # 01:10 CET, before the skipped hour
    with _server(tmp_path / "home", clock) as plane:
        # Berlin skips 02:00-02:59: each named wall time fires an hour later
        berlin = {
            "halves": ("0,30 2 * * *", "Europe/Berlin"),
            "quarters": ("*/15 2 * * *", "Europe/Berlin"),
            "pair": ("15,20 2 * * *", "Europe/Berlin"),
        }
        _fire_through(plane, clock, berlin, _utc(2021, 3, 28, 2))
        # Lord Howe skips 02:00-02:29: the gap's walls land among the walls that exist
        clock.set(_utc(2021, 10, 2, 14, 40))  # 01:10 LHST
        lord_howe = {
            "sevens": ("*/7 * * * *", "Australia/Lord_Howe"),
            "hourly": ("0 * * * *", "Australia/Lord_Howe"),
        }
        _fire_through(plane, clock, lord_howe, _utc(2021, 10, 2, 16, 10))
        # Berlin repeats 02:00-02:59: a firing late in the second pass fires the latest slot
        # of the first pass, 02:45 CEST, and counts 02:15 and 02:30 CEST missed
        clock.set(_utc(2021, 10, 31, 0, 10))  # 02:10 CEST
        made = dls.schedule(
            "late", "*/15 * * * *", queue=dls.SyncQueue(QUEUE, dispatch=plane), tz="Europe/Berlin"
        )
        assert made.next_fire_at == _utc(2021, 10, 31, 0, 15)
        clock.set(_utc(2021, 10, 31, 1, 5))  # 02:05 CET
        row = _until(plane, "late", "last_slot", _utc(2021, 10, 31, 0, 45))
        assert (row.fired, row.missed, row.next_fire_at) == (1, 2, _utc(2021, 10, 31, 2, 0))
        assert _keys(plane, "late") == [slot_key("late", _utc(2021, 10, 31, 0, 45))]
        plane.delete_schedule("late")
        # Made at 03:10 CEST on the spring day: that day's 02:30 is still to fire, at 03:30
        clock.set(_utc(2026, 3, 29, 1, 10))
        made = dls.schedule(
            "nightly", "30 2 * * *", queue=dls.SyncQueue(QUEUE, dispatch=plane), tz="Europe/Berlin"
        )
        assert made.next_fire_at == _utc(2026, 3, 29, 1, 30)
        clock.set(_utc(2026, 3, 29, 1, 30, 1))
        _until(plane, "nightly", "last_slot", _utc(2026, 3, 29, 1, 30))
        assert _keys(plane, "nightly") == [slot_key("nightly", _utc(2026, 3, 29, 1, 30))]
