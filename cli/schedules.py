"""`lakeshore schedules add | ls | show | pause | resume | run-now | rm`: cron schedules (issue 36).

    lakeshore schedules add nightly-eval --cron '0 3 * * *' --tz Europe/Berlin \\
        --queue eval --payload-json '{"suite": "full"}'

The job is a JSON value (or a plain string), as `lakeshore submit` sends one; a thunk or a udf
call is scheduled from Python with `dls.schedule`. Times show in each schedule's own zone, the
zone its cron is read in; `--json` gives them as ISO 8601 UTC.
"""

from __future__ import annotations

import datetime as dt
import time
from zoneinfo import ZoneInfo

import click

from dreamlake.lakeshore.plane.options import plane_options, plane_session
from dreamlake.lakeshore.plane.schedules import CATCHUP, OVERLAP, ScheduleInfo
from dreamlake.lakeshore.queue import SyncQueue
from dreamlake.lakeshore.scheduling import schedule

from .output import age, emit_json, hidden_alias, json_option, report
from .params import Finite, seconds
from .submit import _choose_payload
from .table import Column, print_table, wide_option


@click.group("schedules")
def schedules() -> None:
    """Cron schedules: a job submitted at every slot, once, however many servers run."""


@schedules.command("add")
@click.argument("name")
@click.option("--cron", required=True, help="Five fields, e.g. '0 3 * * *', or @daily.")
@click.option("--tz", default="UTC", show_default=True, help="IANA zone the cron is read in.")
@click.option("--queue", default="default", show_default=True, help="Queue to submit to.")
@click.option("--payload-json", default=None, metavar="JSON", help="The job: a JSON value.")
@click.option("--payload", "payload_text", default=None, help="The job: this plain string.")
@click.option(
    "--catchup",
    type=click.Choice(CATCHUP),
    default="latest",
    show_default=True,
    help="Slots missed while nothing ran: fire none, the latest, or all.",
)
@click.option(
    "--overlap",
    type=click.Choice(OVERLAP),
    default="allow",
    show_default=True,
    help="skip: pass a slot while the last job is still live.",
)
@click.option("--priority", type=Finite(), default=None, help="Priority of each job.")
@click.option("--max-attempts", type=click.IntRange(1, 1000), default=3, show_default=True)
@click.option("--timeout-s", type=seconds(0, low_open=True), default=None, help="Run limit.")
@json_option
@plane_options
def add(
    name: str,
    cron: str,
    tz: str,
    queue: str,
    payload_json: str | None,
    payload_text: str | None,
    catchup: str,
    overlap: str,
    priority: float | None,
    max_attempts: int,
    timeout_s: float | None,
    as_json: bool,
    url: str | None,
    token: str | None,
    namespace: str | None,
) -> None:
    """Create schedule NAME, or replace its cron and job (its state and counts stay)."""
    value = _choose_payload(payload_text, payload_json, None)
    with plane_session(url, token, namespace) as plane:
        info = schedule(
            name,
            cron,
            queue=SyncQueue(queue, dispatch=plane),
            payload=value,
            tz=tz,
            catchup=catchup,
            overlap=overlap,
            priority=priority,
            max_attempts=max_attempts,
            timeout_s=timeout_s,
        )
    report(as_json, info, f"schedule {info.name}: next {zoned(info.next_fire_at, info.tz)}")


#: `schedules ls`: the next firing shows its zone's abbreviation (or `paused`), so the zone and
#: the state are `--wide` only.
LS_COLUMNS = (
    Column("name"),
    Column("queue"),
    Column("cron"),
    Column("state", wide=True),
    Column("next"),
    Column("in", wide=True),
    Column("tz", wide=True),
    Column("last fired", wide=True),
    Column("fired", wide=True),
    Column("missed", wide=True),
)


@schedules.command("ls")
@wide_option
@json_option
@plane_options
def ls(
    wide: bool, as_json: bool, url: str | None, token: str | None, namespace: str | None
) -> None:
    """The namespace's schedules and when each fires next (in its own zone)."""
    with plane_session(url, token, namespace) as plane:
        rows = plane.schedules()
    if as_json:
        emit_json(rows)
        return
    now = time.time()
    print_table(
        LS_COLUMNS,
        [
            (
                r.name,
                r.queue,
                r.cron,
                r.state,
                zoned(r.next_fire_at, r.tz) if r.state == "active" else r.state,
                age(r.next_fire_at - now) if r.next_fire_at and r.state == "active" else "-",
                r.tz,
                zoned(r.last_fired_at, r.tz),
                r.fired,
                r.missed,
            )
            for r in rows
        ],
        wide=wide,
    )


hidden_alias(schedules, "ls", "list")


@schedules.command("show")
@click.argument("name")
@json_option
@plane_options
def show(
    name: str, as_json: bool, url: str | None, token: str | None, namespace: str | None
) -> None:
    """One schedule: its job's settings, next and last firing, fired and missed slots."""
    with plane_session(url, token, namespace) as plane:
        info = plane.schedule(name)
    if as_json:
        emit_json(info)
        return
    _print(info)


def _state_command(action: str, summary: str) -> None:
    @schedules.command(action, help=summary)
    @click.argument("name")
    @json_option
    @plane_options
    def command(
        name: str, as_json: bool, url: str | None, token: str | None, namespace: str | None
    ) -> None:
        with plane_session(url, token, namespace) as plane:
            info = plane.set_schedule_state(name, action)
        if as_json:
            emit_json(info)
        else:
            nxt = zoned(info.next_fire_at, info.tz) if info.state == "active" else "-"
            click.echo(f"schedule {info.name} {info.state}; next {nxt}")


_state_command("pause", "Stop firing NAME until it is resumed.")
_state_command(
    "resume",
    "Fire NAME again from its next slot (with --catchup all: first the slots the pause held).",
)


@schedules.command("run-now")
@click.argument("name")
@json_option
@plane_options
def run_now(
    name: str, as_json: bool, url: str | None, token: str | None, namespace: str | None
) -> None:
    """Submit NAME's job now, outside its cron; prints the job's id. The next slot stays."""
    with plane_session(url, token, namespace) as plane:
        job = plane.run_schedule(name)
    report(as_json, {"schedule": name, "id": job}, job)


@schedules.command("rm")
@click.argument("name")
@plane_options
def rm(name: str, url: str | None, token: str | None, namespace: str | None) -> None:
    """Remove schedule NAME; the jobs it fired stay."""
    with plane_session(url, token, namespace) as plane:
        plane.delete_schedule(name)
    click.echo(f"removed schedule {name}")


def zoned(ts: float | None, tz: str) -> str:
    """An instant in the schedule's zone, with the zone's abbreviation (CET, EDT, ...)."""
    if ts is None:
        return "-"
    try:
        return dt.datetime.fromtimestamp(ts, ZoneInfo(tz)).strftime("%Y-%m-%d %H:%M %Z")
    except (ValueError, KeyError, OSError):  # a zone this box's tzdata lacks
        return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _print(info: ScheduleInfo) -> None:
    rows = [
        ("name", info.name),
        ("namespace", info.namespace),
        ("queue", info.queue),
        ("cron", f"{info.cron} ({info.tz})"),
        ("state", info.state),
        ("catchup", info.catchup),
        ("overlap", info.overlap),
        ("next fire", zoned(info.next_fire_at, info.tz) if info.state == "active" else "-"),
        ("last fired", zoned(info.last_fired_at, info.tz)),
        ("last slot", zoned(info.last_slot, info.tz)),
        ("last job", info.last_job or "-"),
        ("fired", info.fired),
        ("missed", info.missed),
        ("last error", info.last_error or "-"),
        ("priority", info.priority),
        ("max attempts", info.max_attempts),
        ("timeout", f"{info.timeout_s:g}s" if info.timeout_s else "-"),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        click.echo(f"{key.ljust(width)}  {value}")
