"""`lakeshore jobs`: look at invocations from a shell, follow their output, cancel and retry.

    lakeshore jobs ls [--queue Q] [--state S] [--limit N]
    lakeshore jobs show ID
    lakeshore jobs logs ID [--follow] [--since SEQ] [--rank N]
    lakeshore jobs cancel ID [--kill]
    lakeshore jobs retry ID

Tables are for people; `--json` prints the same rows for scripts (`logs --json` prints one JSON
object per frame, so a script can resume with `--since` the last `seq` it saw). Commands that
wait for a job (`logs --follow`, `submit --wait`) exit with a code naming how it ended, so a
script can branch on it without parsing output:

    0 succeeded   10 failed   11 cancelled   12 killed   13 timeout
    124 still queued or running when the wait ran out
    1 the plane refused or could not be reached (unknown id, bad token, ...)   2 usage error

Failure codes start at 10 so that they never collide with 1 and 2, which click and this CLI
already use for "the command itself went wrong".

Frame and result values are decoded without unpickling (`allow_pickle=False`): a shell that
reads logs should never run code it was sent. Pickled values show as a placeholder.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import click

from dreamlake.lakeshore import codec
from dreamlake.lakeshore.errors import DispatchError
from dreamlake.lakeshore.pending import pending_text
from dreamlake.lakeshore.plane.base import Plane
from dreamlake.lakeshore.plane.options import plane_options, plane_session
from dreamlake.lakeshore.resources import describe
from dreamlake.lakeshore.types import MAX_NODES, STATES, TERMINAL_STATES, Frame, Invocation

from .output import emit_json, hidden_alias, json_option, report, when
from .params import count
from .table import Column, print_table, wide_option

if TYPE_CHECKING:
    from rich.console import Console

#: Exit status of a command that waited for a job, by the job's final state.
EXIT_CODES: dict[str, int] = {
    "succeeded": 0,
    "failed": 10,
    "cancelled": 11,
    "killed": 12,
    "timeout": 13,
}
#: The wait ran out with the job still queued or running (as timeout(1) does).
EXIT_STILL_RUNNING = 124
#: How long one request waits for news while following; progress is redrawn after each.
POLL_S = 1.0

STATE_STYLE = {
    "queued": "yellow",
    "running": "cyan",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "magenta",
    "killed": "red",
    "timeout": "red",
    "scheduled": "blue",
    "waiting": "blue",
}


def exit_code(state: str) -> int:
    return EXIT_CODES.get(state, EXIT_STILL_RUNNING)


def preview(data: bytes | None) -> Any:
    """A stored value as something printable: the decoded value, never an unpickled one."""
    if data is None:
        return None
    try:
        return codec.decode(data, allow_pickle=False)
    except DispatchError as exc:
        return f"<{len(data)} bytes not shown: {exc}>"


def plain(value: Any) -> Any:
    """A decoded value as JSON-able data (bytes, tuples, arrays, ... become strings)."""
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        return repr(value)


def brought(runtime: dict[str, Any]) -> str:
    """What a job brings to its worker (issue 46), in a line: its bundle, what shipped, the
    requirements and the names of its variables (never their values: they may be secrets)."""
    parts = []
    if runtime.get("bundle"):
        size = int(runtime.get("bytes") or 0)
        parts.append(f"{runtime['bundle'][:19]} ({runtime.get('files', 0)} files, {size:,} B)")
    if runtime.get("workdir"):
        parts.append("workdir")
    if runtime.get("sources"):
        parts.append("modules " + ", ".join(runtime["sources"]))
    if runtime.get("requirements"):
        parts.append("requires " + " ".join(runtime["requirements"]))
    if runtime.get("env"):
        parts.append("env " + " ".join(sorted(runtime["env"])))
    return "; ".join(parts) or "-"


def placed(placement: dict[str, Any]) -> str:
    """Where an attempt ran, in one line: "worker gpu-box-1, GPUs 0, 1 (NVIDIA H100, ...)"."""
    text = f"worker {placement.get('worker', '?')}"
    gpus = placement.get("gpus") or []
    if gpus:
        indexes = ", ".join(str(g.get("index")) for g in gpus)
        names = sorted({str(g.get("name")) for g in gpus if g.get("name")})
        uuids = ", ".join(str(g["uuid"]) for g in gpus if g.get("uuid"))
        share = gpus[0].get("share", 1)
        text += f", GPU{'s' * (len(gpus) > 1)} {indexes}"
        text += f" ({share:g} of it)" if share < 1 else ""
        text += f" [{', '.join(names)}]" if names else ""
        text += f" uuid {uuids}" if uuids else ""
    return text


def invocation_json(inv: Invocation) -> dict[str, Any]:
    row = asdict(inv)
    row["result"] = plain(preview(inv.result))
    return row


def span(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def timings(inv: Invocation, now: float | None = None) -> dict[str, float | None]:
    """Queued for (submit to start), ran for (start to end), total (submit to end or now)."""
    now = time.time() if now is None else now
    end = inv.finished_at if inv.finished_at is not None else now
    return {
        "waited_s": (inv.started_at or end) - inv.created_at,
        "ran_s": (end - inv.started_at) if inv.started_at is not None else None,
        "total_s": end - inv.created_at,
    }


def console() -> Console:
    """A terminal's own width; a pipe or a file gets wide lines rather than wrapped ids.

    rich is imported here, by the verbs that draw with it (`jobs show`), not with the module:
    its ~50 ms import would be most of `jobs ls`'s start-up (issue 17, item 5)."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=160)


def styled_state(state: str) -> str:
    return f"[{STATE_STYLE.get(state, 'white')}]{state}[/]"


def first_line(text: str | None) -> str:
    """The line of an error that says what it was, whole (a table folds it, never cuts it)."""
    if not text:
        return ""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    # A traceback's last line is the exception; a plain message is its first line.
    line = lines[-1] if lines and lines[0].startswith("Traceback") else (lines or [""])[0]
    return line


@click.group("jobs")
def jobs() -> None:
    """Invocations: list, inspect, follow, cancel, retry.

    \b
    Commands that wait for a job (logs --follow, submit --wait) exit with:
      0 succeeded   10 failed   11 cancelled   12 killed   13 timeout
      124 still queued or running when the wait ran out
      1 the plane refused or was unreachable   2 usage error
    """


#: `jobs ls`: id to took fit 80 columns with a ULID and a queue such as `training-h100`.
LS_COLUMNS = (
    Column("id"),
    Column("queue"),
    Column("state"),
    Column("submitted"),
    Column("took"),
    Column("attempt", wide=True),
    Column("worker", wide=True),
    Column("error", wide=True),
)


@jobs.command("ls")
@click.option("--queue", "-q", default=None, help="Only this queue.")
@click.option("--state", "-s", type=click.Choice(STATES), default=None, help="Only this state.")
@click.option("--limit", "-n", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--before", default=None, help="Page: only ids older than this one.")
@click.option("--map", "map_id", default=None, help="Only the jobs of this map (f.map).")
@wide_option
@json_option
@plane_options
def ls(
    queue: str | None,
    state: str | None,
    limit: int,
    before: str | None,
    map_id: str | None,
    wide: bool,
    as_json: bool,
    url: str | None,
    token: str | None,
    namespace: str | None,
) -> None:
    """List invocations, newest first."""
    with plane_session(url, token, namespace) as plane:
        rows = plane.invocations(
            queue=queue, state=state, limit=limit, before=before, map_id=map_id
        )
    if as_json:
        emit_json([invocation_json(r) for r in rows])
        return
    now = time.time()
    # Plain aligned columns, not rich (see cli/table.py): a list read at a glance or piped on.
    print_table(
        LS_COLUMNS,
        (
            (
                r.id,
                r.queue,
                r.state,
                when(r.created_at, short=True),
                span(timings(r, now)["total_s"]),
                f"{r.attempt}/{r.max_attempts}",
                r.worker or "",
                first_line(r.error) if r.state != "succeeded" else "",
            )
            for r in rows
        ),
        wide=wide,
    )
    if len(rows) == limit:
        click.echo(f"(more: --before {rows[-1].id})", err=True)


hidden_alias(jobs, "ls", "list")


@jobs.command("show")
@click.argument("inv_id", metavar="ID")
@json_option
@plane_options
def show(
    inv_id: str, as_json: bool, url: str | None, token: str | None, namespace: str | None
) -> None:
    """State, attempts, timings, worker, and the error with its traceback."""
    with plane_session(url, token, namespace) as plane:
        inv = plane.invocation(inv_id)
    t = timings(inv)
    if as_json:
        emit_json({**invocation_json(inv), **t})
        return
    from rich.markup import escape
    from rich.panel import Panel
    from rich.table import Table

    table = Table(show_header=False, box=None)
    table.add_row("id", inv.id)
    table.add_row("queue", f"{inv.queue} ({inv.namespace})")
    table.add_row("state", styled_state(inv.state) + (" (kill requested)" * inv.kill_requested))
    table.add_row("attempt", f"{inv.attempt} of {inv.max_attempts}")
    table.add_row("priority", f"{inv.priority:g}")
    table.add_row("key", escape(inv.key or "-"))
    table.add_row("worker", escape(inv.worker or "-"))
    table.add_row("timeout", span(inv.timeout_s) if inv.timeout_s else "-")
    table.add_row("resources", escape(describe(inv.resources)))
    placement = {k: v for k, v in (inv.placement or {}).items() if k != "preparing"}
    if placement:
        table.add_row("placement", escape(placed(placement)))
    if inv.state == "running" and (preparing := (inv.placement or {}).get("preparing")):
        table.add_row("preparing", escape(str(preparing)))
    if inv.runtime:
        table.add_row("runtime", escape(brought(inv.runtime)))
    if inv.nodes > 1:
        table.add_row("nodes", escape(gang_line(inv)))
        for part in (inv.gang or {}).get("parts", []):
            where = part["worker"] + (f" ({part['addr']})" if part.get("addr") else "")
            table.add_row(f"  rank {part['rank']}", escape(f"{part['state']} on {where}"))
    if inv.after:
        waiting = f" (waiting on {inv.waiting_on})" if inv.state == "waiting" else ""
        table.add_row("after", escape(" ".join(inv.after)) + waiting)
    why = pending_text(inv.pending_reason, inv.unschedulable_reason)
    if inv.state == "queued" and why:
        table.add_row("pending", escape(why))
    table.add_row("submitted", when(inv.created_at))
    table.add_row("started", when(inv.started_at))
    table.add_row("finished", when(inv.finished_at))
    table.add_row("queued for", span(t["waited_s"]))
    table.add_row("ran for", span(t["ran_s"]))
    table.add_row("total", span(t["total_s"]))
    if inv.state == "succeeded":
        table.add_row("result", escape(repr(preview(inv.result))))
    out = console()
    out.print(table)
    if inv.error and inv.state != "succeeded":
        title = "error" if inv.terminal else "error of the previous attempt"
        out.print(Panel(escape(inv.error.rstrip()), title=title, border_style="red"))


def gang_line(inv: Invocation) -> str:
    """A gang's newest attempt in one line: its width, where it stands, what ended it."""
    gang = inv.gang
    if gang is None:
        return f"{inv.nodes} (no part held yet)"
    words = f"{inv.nodes}, attempt {gang['attempt']}: {gang['state']}"
    if gang["state"] == "holding":
        words += f", {gang['held']} of {inv.nodes} parts held"
    if gang.get("outcome"):
        words += f" ({gang['outcome']})"
    if failed := gang.get("failed"):
        words += f"; rank {failed['rank']} on {failed['worker']} first: {failed['why']}"
    return words


def frame_json(frame: Frame) -> dict[str, Any]:
    return {"seq": frame.seq, "kind": frame.kind, "value": plain(preview(frame.value))}


def _print_frame(frame: Frame, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(frame_json(frame), sort_keys=True, default=str))
        return
    value = preview(frame.value)
    text = value if isinstance(value, str) else json.dumps(plain(value), default=str)
    if frame.kind == "VALUE":
        click.echo(text)
    elif frame.kind == "ERROR":
        click.echo(f"ERROR {text}" if value is not None else "ERROR", err=True)


def follow_frames(
    plane: Plane, inv_id: str, since: int, follow: bool, as_json: bool, rank: int = 0
) -> str:
    """Print frames after `since` (of a multi-node job, one rank's); with follow, until the
    job ends. Returns its state."""
    while True:
        frames = plane.frames(inv_id, since=since, wait_s=POLL_S if follow else 0.0, rank=rank)
        for frame in frames:
            _print_frame(frame, as_json)
            since = frame.seq
            if frame.kind in ("END", "ERROR"):
                return plane.invocation(inv_id).state
        if not frames:
            state = plane.invocation(inv_id).state
            if not follow or state in TERMINAL_STATES:
                # A last look: a frame posted just before the job ended.
                for frame in plane.frames(inv_id, since=since, rank=rank):
                    _print_frame(frame, as_json)
                    since = frame.seq
                return state


@jobs.command("logs")
@click.argument("inv_id", metavar="ID")
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the job ends.")
@click.option(
    "--since",
    type=count(-1),
    default=-1,
    show_default=True,
    help="Only frames after this seq (resume where a previous read stopped).",
)
@click.option(
    "--rank",
    type=count(0, MAX_NODES - 1),
    default=0,
    show_default=True,
    help="Of a multi-node job (--nodes), the part whose output to print (0: rank 0's).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON line per frame.")
@plane_options
def logs(
    inv_id: str,
    follow: bool,
    since: int,
    rank: int,
    as_json: bool,
    url: str | None,
    token: str | None,
    namespace: str | None,
) -> None:
    """Print a job's frames (its yields, or its output lines for `lakeshore exec`).

    With --follow, the exit status names how the job ended (see `lakeshore jobs --help`).
    """
    with plane_session(url, token, namespace) as plane:
        try:
            state = follow_frames(plane, inv_id, since, follow, as_json, rank)
        except KeyboardInterrupt:
            sys.exit(130)
    if follow:
        sys.exit(exit_code(state))


@jobs.command("cancel")
@click.argument("inv_id", metavar="ID")
@click.option("--kill", is_flag=True, help="Also end a running attempt (state killed).")
@json_option
@plane_options
def cancel(
    inv_id: str,
    kill: bool,
    as_json: bool,
    url: str | None,
    token: str | None,
    namespace: str | None,
) -> None:
    """Cancel a queued job; with --kill, also stop a running one. Exit 1 if nothing changed."""
    with plane_session(url, token, namespace) as plane:
        done = plane.cancel(inv_id, kill=kill)
        inv = plane.invocation(inv_id)
    if as_json:
        emit_json({"id": inv_id, "cancelled": done, "state": inv.state})
    elif done:
        click.echo(
            f"{inv_id}: kill requested (running on {inv.worker})"
            if inv.state == "running"
            else f"{inv_id}: {inv.state}"
        )
    if not done:
        hint = " (add --kill to stop a running job)" if inv.state == "running" else ""
        already = "already " if inv.terminal else ""
        raise click.ClickException(f"{inv_id} not cancelled: it is {already}{inv.state}{hint}")


@jobs.command("retry")
@click.argument("inv_id", metavar="ID")
@json_option
@plane_options
def retry(
    inv_id: str, as_json: bool, url: str | None, token: str | None, namespace: str | None
) -> None:
    """Requeue a failed, killed or timed-out job as a new attempt (same id)."""
    with plane_session(url, token, namespace) as plane:
        inv = plane.retry(inv_id)
    report(
        as_json,
        invocation_json(inv),
        f"{inv.id}: queued again on {inv.queue} (attempt {inv.attempt + 1})",
    )
