"""The floor suites as `Measurement`s: the embedded SQLite plane beside SqliteHuey and raw SQLite
(`sqlite_plane.py`), and the Postgres plane beside pgqueuer and procrastinate
(`postgres_plane.py`), each run `reps` times in this run."""

from __future__ import annotations

from collections import defaultdict

from . import postgres_plane, sqlite_plane
from .common import POSTGRES_URL, Measurement, Settings
from .report import Row

HUEY_FSYNC_NOTE = "SqliteHuey fsync=True at FULL, fsync=False at NORMAL"


def _collect(
    rows_per_rep: list[list[Row]], suite: str, durability: str | None, n: int
) -> list[Measurement]:
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    notes: dict[tuple[str, str], str] = {}
    for rows in rows_per_rep:
        for r in rows:
            values[(r.group, r.system)].append(r.value)
            notes[(r.group, r.system)] = r.note
    out = []
    for (group, system), vals in values.items():
        metric, _, mode = group.partition(", ")
        dur = mode if durability is None else durability
        out.append(
            Measurement(suite, metric, system, vals, "ops/s", dur, notes[(group, system)], n)
        )
    return out


def measure(s: Settings) -> list[Measurement]:
    n = min(s.jobs, 5000)
    return _collect([sqlite_plane.measure(n) for _ in range(s.reps)], "embedded", None, n)


def measure_postgres(s: Settings) -> list[Measurement]:
    n = min(s.jobs, 2000)
    reps = [postgres_plane.measure(POSTGRES_URL, n) for _ in range(s.reps)]
    return _collect(reps, "postgres", "Postgres synchronous_commit=on", n)
