"""`lakeshore status [--watch]`: the fleet on one screen, as `rq info -i` or `ray status` show it.

Tables: queues (depth, running, slots, completions per second, age of the oldest queued job;
below it, the progress of each map in flight and the namespace's cron schedules, when there are
any), daemons (state, slots busy, GPUs, heartbeat age) and the controller's last decisions (the
queue events it records for every scaling decision, see cli/controller.py). Everything is read
through the Plane protocol the other verbs use, so the screen is the same on this box's SQLite
plane and over `--url`.

Two figures the protocol has no direct read for are derived from `invocations()` listings,
each bounded in cost whatever the depth:
- rate: completions in the last RATE_WINDOW_S, from the newest RATE_SAMPLE succeeded and failed
  rows; when the sample is full inside the window the figure is a floor and is shown as `>=`.
- oldest age: ids are ULIDs, so `before=<ULID of time t>, limit=1` asks "is any job queued since
  before t?"; a geometric search on t finds the oldest within OLDEST_PRECISION in ~10 reads.

`--watch` redraws in place (rich.live) every `--interval-s`; with `--json` it prints one JSON
object per refresh instead (one line each), for a script that follows the fleet.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import click

from dreamlake.lakeshore.plane.base import Plane
from dreamlake.lakeshore.plane.options import plane_options, plane_session
from dreamlake.lakeshore.plane.schedules import ScheduleInfo
from dreamlake.lakeshore.types import WorkerInfo

from .controller import CONTROLLER_EVENTS
from .output import age, json_option, plain
from .params import count, seconds
from .schedules import zoned
from .table import Column, table_lines, wide_option

#: Completions counted over this window for the rate column.
RATE_WINDOW_S = 60.0
#: Rows of each terminal state read for the rate; a busier window shows a floor (`>=`).
RATE_SAMPLE = 500
#: The oldest queued job's age is found to within this ratio (5%: two significant figures).
OLDEST_PRECISION = 1.05
#: The most listing reads `oldest_queued_age` makes: far more than its search ever needs (each
#: read halves the gap in log-space), so rows that disagree with their ids cannot spin it.
MAX_OLDEST_READS = 64
#: Controller decisions shown, newest first, and the events read per queue to find them.
DECISIONS = 10
EVENTS_PER_QUEUE = 50


def _ulid_before(ts: float) -> str:
    """The smallest ULID of millisecond `ts`: every id below it was created before `ts`."""
    from ulid import ULID

    return str(ULID.from_timestamp(max(0.0, ts)))[:10] + "0" * 16


def _queued_before(plane: Plane, queue: str, ts: float) -> float | None:
    """When the newest job still queued whose id is older than `ts` was submitted, if any.

    The listing bounds ids, and an id can be older than its row's created_at (a producer mints
    it before the plane stamps the row, a moment or a retry earlier): the older of the two is
    the answer, so a job found below the bound is always at least as old as the bound and the
    search below always moves.
    """
    rows = plane.invocations(queue=queue, state="queued", limit=1, before=_ulid_before(ts))
    if not rows:
        return None
    from ulid import ULID

    try:
        minted = ULID.from_str(rows[0].id).timestamp
    except ValueError:
        minted = rows[0].created_at
    return min(rows[0].created_at, minted)


def oldest_queued_age(plane: Plane, queue: str, now: float) -> float | None:
    """Age of the oldest queued job (within OLDEST_PRECISION); None when nothing is queued.

    `low` is always the age of a job known to be queued, `high` an age no queued job reaches;
    each read either finds an older job (raising `low` to its exact age) or lowers `high`.
    """
    newest = plane.invocations(queue=queue, state="queued", limit=1)
    if not newest:
        return None
    low = max(now - newest[0].created_at, 0.0)
    high: float | None = None
    for _ in range(MAX_OLDEST_READS):  # a bound whatever the rows say: each read halves a gap
        if high is not None and high <= low * OLDEST_PRECISION:
            break
        probe = max(low, 1.0) * 2 if high is None else (max(low, 1e-3) * high) ** 0.5
        if probe > now:  # older than the epoch: nothing is
            high = probe
            break
        found = _queued_before(plane, queue, now - probe)
        if found is None:
            high = probe
        else:
            low = max(low, now - found)
    return low


def _rate(plane: Plane, queue: str, now: float) -> tuple[float, bool]:
    """(completions per second over RATE_WINDOW_S, whether that is only a floor)."""
    since = now - RATE_WINDOW_S
    done, floor = 0, False
    for state in ("succeeded", "failed"):
        rows = plane.invocations(queue=queue, state=state, limit=RATE_SAMPLE)
        recent = sum(1 for r in rows if r.finished_at is not None and r.finished_at >= since)
        done += recent
        floor = floor or (recent == RATE_SAMPLE)
    return done / RATE_WINDOW_S, floor


def _slots(row: WorkerInfo) -> tuple[int, int]:
    total = int(row.info.get("concurrency", len(row.load.get("slots", [])) or 1))
    return int(row.load.get("busy", 0)), total


def _queue_row(plane: Plane, name: str, state: str, now: float) -> dict[str, Any]:
    stats = plane.stats(name)
    rate, floor = _rate(plane, name, now)
    oldest = oldest_queued_age(plane, name, now) if stats.get("pending") else None
    return {
        "name": name,
        "state": state,
        "depth": int(stats.get("pending", 0)),
        "running": int(stats.get("running", 0)),
        "scheduled": int(stats.get("scheduled", 0)),
        "waiting": int(stats.get("waiting", 0)),
        "daemons": int(stats.get("daemon_count", 0)),
        "slots": int(stats.get("slots", 0)),
        "rate_per_s": rate,
        "rate_is_floor": floor,
        "oldest_age_s": oldest,
        "unschedulable": int(stats.get("unschedulable", 0)),
        "waiting_for_capacity": int(stats.get("waiting_for_capacity", 0)),
        "gangs_waiting": int(stats.get("gangs_waiting", 0)),
        "maps": list(stats.get("maps") or []),
    }


def _daemon_row(w: WorkerInfo, now: float) -> dict[str, Any]:
    busy, total = _slots(w)
    return {
        "name": w.name,
        "id": w.id,
        "state": w.state,
        "queues": w.queues,
        "host": w.host,
        "slots": total,
        "busy": busy,
        "gpus": len(w.info.get("gpus") or []),
        "heartbeat_at": w.heartbeat_at,
        "heartbeat_age_s": max(0.0, now - w.heartbeat_at),
    }


def _decisions(plane: Plane, names: list[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name in names:
        for event in plane.events(name, limit=EVENTS_PER_QUEUE):
            if event.get("kind") in CONTROLLER_EVENTS:
                detail = event.get("detail") or {}
                rows.append(
                    {
                        "queue": name,
                        "at": event.get("at"),
                        "kind": event.get("kind"),
                        "desired": detail.get("desired"),
                        "current": detail.get("current"),
                        "reason": detail.get("reason", ""),
                    }
                )
    rows.sort(key=lambda r: float(r["at"] or 0.0), reverse=True)
    return rows[:DECISIONS]


def snapshot(plane: Plane, now: float | None = None) -> dict[str, Any]:
    """Everything the screen shows, as plain data (epoch times; `plain` makes them ISO)."""
    now = time.time() if now is None else now
    own = [q for q in plane.queues() if q.namespace == plane.namespace]
    queues = [_queue_row(plane, q.name, q.state, now) for q in own]
    daemons = [_daemon_row(w, now) for w in plane.workers() if w.state != "gone"]
    return {
        "namespace": plane.namespace,
        "at": now,
        "queues": queues,
        "daemons": daemons,
        "decisions": _decisions(plane, [q.name for q in own]),
        "schedules": [_schedule_row(s) for s in plane.schedules()],
    }


def _schedule_row(info: ScheduleInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "queue": info.queue,
        "cron": info.cron,
        "tz": info.tz,
        "state": info.state,
        "paused": info.state == "paused",
        "next_fire_at": info.next_fire_at if info.state == "active" else None,
        "last_fired_at": info.last_fired_at,
        "fired": info.fired,
        "missed": info.missed,
    }


def _rate_text(row: dict[str, Any]) -> str:
    text = f"{row['rate_per_s']:.1f}/s" if row["rate_per_s"] else "0"
    return (">=" + text) if row["rate_is_floor"] else text


#: The queues table: the counts a glance needs fit 80 columns with a queue such as
#: `training-h100` and a depth of millions; `--wide` adds the rest. The job states keep their
#: names (`scheduled`, `waiting` on dependencies); the two pending reasons are titled apart.
QUEUE_COLUMNS = (
    Column("queue"),
    Column("state"),
    Column("depth"),
    Column("running"),
    Column("scheduled", wide=True),
    Column("waiting", wide=True),
    Column("daemons", wide=True),
    Column("slots"),
    Column("rate"),
    Column("oldest"),
    Column("unschedulable"),
    Column("no-capacity", wide=True),
    Column("gangs", wide=True),
)
DAEMON_COLUMNS = (
    Column("daemon"),
    Column("state"),
    Column("queues"),
    Column("host", wide=True),
    Column("slots"),
    Column("gpus"),
    Column("heartbeat"),
)
DECISION_COLUMNS = (
    Column("when"),
    Column("queue"),
    Column("decision"),
    Column("workers"),
    Column("reason"),  # last: folds onto lines of its own
)
MAP_COLUMNS = (
    Column("map"),  # whole: `lakeshore jobs ls --map ID` takes it
    Column("queue"),
    Column("ended"),
    Column("failed"),
    Column("cancelled", wide=True),
    Column("running"),
    Column("queued"),
    Column("scheduled", wide=True),
)
SCHEDULE_COLUMNS = (
    Column("schedule"),  # whole: `lakeshore schedules show` takes it
    Column("queue"),
    Column("next fire"),  # `paused` for a paused one
    Column("last fired", wide=True),
    Column("missed"),
    Column("paused", wide=True),
)


def render(snap: dict[str, Any], *, wide: bool = False) -> str:
    """The tables of a snapshot, times as ages, each under its title (see cli/table.py)."""
    sections = [
        _section(
            f"queues in {snap['namespace']}",
            table_lines(QUEUE_COLUMNS, (_queue_cells(q) for q in snap["queues"]), wide=wide),
        )
    ]
    maps = [(q["name"], m) for q in snap["queues"] for m in q.get("maps", [])]
    if maps:
        sections.append(_section("maps in flight", _maps_lines(maps, wide)))
    if snap.get("schedules"):
        sections.append(_section("schedules", _schedules_lines(snap, wide)))
    daemons = [_daemon_cells(d) for d in snap["daemons"]]
    sections.append(
        _section("daemons", table_lines(DAEMON_COLUMNS, daemons, wide=wide))
        if daemons
        else "daemons: none"
    )
    decisions = _decision_cells(snap)
    sections.append(
        _section("controller", table_lines(DECISION_COLUMNS, decisions, wide=wide))
        if decisions
        else "controller: no decisions recorded"
    )
    return "\n\n".join(sections)


def _section(title: str, lines: list[str]) -> str:
    return "\n".join([title, *lines])


def _queue_cells(q: dict[str, Any]) -> tuple[object, ...]:
    return (
        q["name"],
        q["state"],
        q["depth"],
        q["running"],
        q.get("scheduled", 0),
        q.get("waiting", 0),
        q["daemons"],
        q["slots"],
        _rate_text(q),
        age(q["oldest_age_s"]),
        q.get("unschedulable", 0),
        q.get("waiting_for_capacity", 0),
        q.get("gangs_waiting", 0),
    )


def _daemon_cells(d: dict[str, Any]) -> tuple[object, ...]:
    return (
        d["name"],
        d["state"],
        ",".join(d["queues"]) or "default",
        d["host"] or "?",
        f"{d['busy']}/{d['slots']}",
        d["gpus"],
        age(d["heartbeat_age_s"]) + " ago",
    )


def _decision_cells(snap: dict[str, Any]) -> list[tuple[object, ...]]:
    now = float(snap["at"])
    rows: list[tuple[object, ...]] = []
    for e in snap["decisions"]:
        was = "?" if e["current"] is None else e["current"]
        sized = "" if e["desired"] is None else f"{was} -> {e['desired']}"
        when = age(now - float(e["at"] or now)) + " ago"
        rows.append((when, e["queue"], e["kind"], sized, e["reason"]))
    return rows


#: A map's states in the order its progress reads.
MAP_STATES = ("succeeded", "failed", "cancelled", "running", "queued", "scheduled")


def _maps_lines(maps: list[tuple[str, dict[str, Any]]], wide: bool) -> list[str]:
    """The maps in flight (f.map): how many of their jobs have ended, and how."""
    rows = []
    for queue, m in maps:
        states: dict[str, int] = m.get("states") or {}
        ended = sum(n for s, n in states.items() if s not in ("running", "queued", "scheduled"))
        jobs = int(m.get("jobs", 0))
        counts = (states.get(s, 0) for s in MAP_STATES[1:])
        rows.append((m["map_id"], queue, f"{ended}/{jobs}", *counts))
    return table_lines(MAP_COLUMNS, rows, wide=wide)


def _schedules_lines(snap: dict[str, Any], wide: bool) -> list[str]:
    """The cron schedules: when each fires next and last did, in its own zone, and what it
    missed (slots passed unfired: catchup, overlap skips, a refused submit)."""
    now = float(snap["at"])
    rows = []
    for s in snap["schedules"]:
        nxt = s["next_fire_at"]
        when = "-" if nxt is None else f"{zoned(nxt, s['tz'])} (in {age(max(0.0, nxt - now))})"
        paused = "yes" if s["paused"] else "no"
        when = "paused" if s["paused"] else when
        rows.append(
            (s["name"], s["queue"], when, zoned(s["last_fired_at"], s["tz"]), s["missed"], paused)
        )
    return table_lines(SCHEDULE_COLUMNS, rows, wide=wide)


def _watch(plane: Plane, interval_s: float, times: int | None, as_json: bool, wide: bool) -> None:
    """Redraw every interval until Ctrl-C (or `times` refreshes); a wait, not a busy loop."""
    from rich.console import Console  # only here: the screen drawn once starts without rich
    from rich.live import Live
    from rich.text import Text

    tick = threading.Event()  # never set: its wait is an interruptible sleep
    shown = 0
    live = None if as_json else Live(console=Console(), auto_refresh=False, transient=False)
    try:
        if live is not None:
            live.start()
        while times is None or shown < times:
            if shown:
                tick.wait(interval_s)
            snap = snapshot(plane)
            shown += 1
            if live is None:
                click.echo(json.dumps(plain(snap), sort_keys=True, default=str))
            else:
                live.update(Text(render(snap, wide=wide)), refresh=True)
    except KeyboardInterrupt:
        pass
    finally:
        if live is not None:
            live.stop()


@click.command("status")
@click.option("--watch", "-w", is_flag=True, help="Refresh in place until Ctrl-C.")
@click.option(
    "--interval-s",
    type=seconds(0.1),
    default=2.0,
    show_default=True,
    help="With --watch: seconds between refreshes.",
)
@click.option(
    "--count",
    "times",
    type=count(1),
    default=None,
    help="With --watch: stop after this many refreshes.",
)
@wide_option
@json_option
@plane_options
def status(
    watch: bool,
    interval_s: float,
    times: int | None,
    wide: bool,
    as_json: bool,
    url: str | None,
    token: str | None,
    namespace: str | None,
) -> None:
    """One screen: queues, maps and schedules, daemons and the controller's last decisions.

    The tables fit 80 columns; --wide adds every column (scheduled and waiting jobs, daemons,
    jobs waiting for capacity, hosts, ...). With --json, one JSON object (times as ISO 8601,
    ages in seconds), complete; with --watch --json, one such object per line per refresh.
    """
    with plane_session(url, token, namespace) as plane:
        if watch:
            _watch(plane, interval_s, times, as_json, wide)
            return
        snap = snapshot(plane)
    if as_json:
        click.echo(json.dumps(plain(snap), indent=2, sort_keys=True, default=str))
    else:
        click.echo(render(snap, wide=wide))
