"""Delay and schedule lateness (issue 36): how late a job is claimed after its due time, with
100,000 other jobs scheduled on the same plane (an hour out, so they only weigh on the store).

One embedded SQLite plane (a file, synchronous=FULL). A claimer in another thread waits on the
queue with a long-poll claim and acks at once; a job's lateness is its row's `started_at` (the
claim's commit) minus the time it was due:

- delays: probe jobs submitted with `at` spread over the next two seconds;
- schedules: cron schedules `* * * * *` that all fire at the next minute's slot (the suite waits
  for it: up to a minute), each a firing transaction of its own, the waiting claim's wake-up
  set for the slot (store/schedules.py).

Beside them, the floor measured in the same run: how late a bare `threading.Event().wait(50 ms)`
wakes on this box (the timer under any delay).

Run: .venv/bin/python -m bench --only lateness [--quick]
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane.dispatch import LocalPlane
from dreamlake.lakeshore.types import ClaimArgs, SubmitRequest

from .common import Measurement, Settings, pct, say

QUEUE = "due"
BACKLOG = 100_000
BATCH = 1000


def measure(s: Settings) -> list[Measurement]:
    backlog = 10_000 if s.quick else BACKLOG
    probes = 50 if s.quick else 200
    schedules = 20 if s.quick else 100
    with tempfile.TemporaryDirectory(prefix="bench-lateness-") as tmp:
        path = Path(tmp) / "plane.db"
        with LocalPlane(path) as plane, LocalPlane(path) as worker_plane:
            _backlog(plane, backlog)
            say(f"lateness: {backlog} jobs scheduled an hour out")
            delays, crons = [], []
            for _ in range(s.reps):
                delays.append(_delays(plane, worker_plane, probes))
            crons.append(_schedules(plane, worker_plane, schedules))
    note = f"{backlog:,} jobs scheduled an hour out; a long-polling claimer; started_at - due"
    label = "lakeshore embedded sqlite"
    dur = "synchronous=FULL"
    out = []
    for name, runs, n in (("delay", delays, probes), ("schedule", crons, schedules)):
        for p in (50, 99):
            values = [pct(r, p) * 1000 for r in runs]
            out.append(Measurement("lateness", f"{name} p{p}", label, values, "ms", dur, note, n))
    floor = [_timer_floor(probes) for _ in range(s.reps)]
    for p in (50, 99):
        values = [pct(r, p) * 1000 for r in floor]
        note = "threading.Event().wait(50 ms), its overshoot"
        out.append(
            Measurement(
                "lateness", f"delay p{p}", "floor: a timed wait", values, "ms", "", note, probes
            )
        )
    return out


def _timer_floor(n: int, wait_s: float = 0.05) -> list[float]:
    """How late a bare timed wait wakes here, in seconds: the floor under any delay."""
    event = threading.Event()
    out = []
    for _ in range(n):
        target = time.time() + wait_s
        event.wait(wait_s)
        out.append(time.time() - target)
    return out


def _backlog(plane: LocalPlane, n: int) -> None:
    payload = dls.encode(None)
    for start in range(0, n, BATCH):
        size = min(BATCH, n - start)
        plane.submit(QUEUE, [SubmitRequest(payload, delay_s=3600.0) for _ in range(size)])


def _claimer(plane: LocalPlane, n: int, done: threading.Event) -> threading.Thread:
    def run() -> None:
        taken = 0
        while taken < n:
            for job in plane.claim_many(ClaimArgs([QUEUE], "bench", limit=100), wait_s=5.0):
                plane.ack(job.id, job.lease, None)
                taken += 1
        done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _late(plane: LocalPlane, due: dict[str, float]) -> list[float]:
    return [plane.invocation(i).started_at - at for i, at in due.items()]  # type: ignore[operator]


def _delays(plane: LocalPlane, worker: LocalPlane, n: int) -> list[float]:
    done = threading.Event()
    start = time.time() + 1.0
    ats = [start + 2.0 * i / n for i in range(n)]
    ids = plane.submit(QUEUE, [SubmitRequest(dls.encode(i), at=at) for i, at in enumerate(ats)])
    _claimer(worker, n, done).join(timeout=60)
    return _late(plane, dict(zip(ids, ats, strict=True)))


def _schedules(plane: LocalPlane, worker: LocalPlane, n: int) -> list[float]:
    q = dls.SyncQueue(QUEUE, dispatch=plane)
    slot = 0.0
    for i in range(n):
        slot = dls.schedule(f"tick-{i}", "* * * * *", queue=q, payload=i).next_fire_at or 0.0
    say(f"lateness: waiting {slot - time.time():.0f} s for the next minute's slot")
    done = threading.Event()
    _claimer(worker, n, done).join(timeout=120)
    rows = {s.last_job: s.last_slot or 0.0 for s in plane.schedules() if s.last_job}
    for s in plane.schedules():
        plane.delete_schedule(s.name)
    return _late(plane, rows)
