"""`lakeshore submit`: a producer from a shell.

    lakeshore submit QUEUE --payload-json '{"lr": 0.1}' [--key K] [--priority P] [--wait]
        [--delay-s S | --at TIME] [--after ID ...]

The payload is any JSON value (`--payload-json -` reads it from stdin, `--payload-json @f.json`
from a file), or a plain string with `--payload TEXT`; it rides as plain msgpack, which a daemon's
`--handler` or any custom worker receives as the decoded value. Without `--wait` the invocation id
is the only line on stdout, so `ID=$(lakeshore submit ...)` works. With `--wait`, progress goes to
stderr (a live status line on a terminal, one line per state change otherwise), stdout gets one
JSON object `{id, state, result, error}`, and the exit status names the outcome (see `lakeshore
jobs --help`: 0 succeeded, 10 failed, 11 cancelled, 12 killed, 13 timeout, 124 still running).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from dreamlake.lakeshore.plane.base import Plane
from dreamlake.lakeshore.plane.options import plane_options, plane_session
from dreamlake.lakeshore.queue import SyncQueue
from dreamlake.lakeshore.types import TERMINAL_STATES, Invocation

from .jobs import (
    EXIT_STILL_RUNNING,
    POLL_S,
    exit_code,
    plain,
    preview,
    span,
)
from .params import Finite, Moment, seconds
from .runtime_options import runtime_of, runtime_options

#: `--json` meant the payload before it meant output format everywhere else; it still works for
#: one release, with this warning on stderr.
JSON_DEPRECATED = (
    "warning: `submit --json PAYLOAD` is deprecated and will be removed in the next release: "
    "use --payload-json (or --payload TEXT for a plain string)"
)


def _choose_payload(text: str | None, as_json: str | None, legacy: str | None) -> Any:
    """The one payload option given (none: null); the deprecated --json warns and still works."""
    options = (("--payload", text), ("--payload-json", as_json), ("--json", legacy))
    given = [name for name, value in options if value is not None]
    if len(given) > 1:
        raise click.UsageError(f"give one payload option, not {' and '.join(given)}")
    if text is not None:
        return text
    if legacy is not None:
        click.echo(JSON_DEPRECATED, err=True)
        return _payload(legacy, "--json")
    return _payload("null" if as_json is None else as_json, "--payload-json")


def _payload(text: str, option: str) -> Any:
    """A JSON payload option's value: literal JSON, `-` for stdin, `@path` for a file."""
    source = option
    if text == "-":
        text, source = sys.stdin.read(), "stdin"
    elif text.startswith("@"):
        path = Path(text[1:])
        try:
            text, source = path.read_text(), str(path)
        except OSError as exc:
            raise click.BadParameter(f"cannot read {path}: {exc}", param_hint=option) from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not valid JSON ({source}): {exc}", param_hint=option) from None
    except RecursionError:
        raise click.BadParameter(
            f"the JSON ({source}) is nested deeper than a payload may be: flatten it",
            param_hint=option,
        ) from None


def wait_for(plane: Plane, inv_id: str, timeout_s: float, console: Console) -> Invocation:
    """Wait for a terminal state against a deadline, showing progress on stderr.

    Each request is a long-poll that returns at once when the job ends, so the wait costs no
    latency; it is cut into POLL_S pieces only to redraw the state and the elapsed time.
    """
    deadline = time.monotonic() + timeout_s
    started = time.monotonic()
    last_state = ""
    status = console.status("submitted") if console.is_terminal else None
    if status is not None:
        status.start()
    try:
        while True:
            remaining = deadline - time.monotonic()
            inv = plane.invocation(inv_id, wait_s=max(0.0, min(POLL_S, remaining)))
            elapsed = span(time.monotonic() - started)
            where = f" on {inv.worker}" if inv.worker and inv.state == "running" else ""
            line = f"{inv_id} {inv.state}{where} ({elapsed}, attempt {inv.attempt})"
            if status is not None:
                status.update(line)
            elif inv.state != last_state:
                console.print(f"# {line}", highlight=False)
            last_state = inv.state
            if inv.state in TERMINAL_STATES or deadline - time.monotonic() <= 0:
                return inv
    finally:
        if status is not None:
            status.stop()


@click.command("submit")
@click.argument("queue")
@click.option(
    "--payload-json",
    "payload_json",
    default=None,
    metavar="JSON",
    help="The payload: a JSON value, '-' for stdin, or @file.json (default: null).",
)
@click.option("--payload", "payload_text", default=None, help="The payload: this plain string.")
@click.option(
    "--json", "legacy_json", default=None, hidden=True, help="Deprecated: use --payload-json."
)
@click.option("--key", default=None, help="Idempotency key: the same key returns the same id.")
@click.option("--priority", type=Finite(), default=None, help="Priority (higher runs first).")
@click.option(
    "--max-attempts", type=click.IntRange(1, 1000), default=3, show_default=True, help="Attempts."
)
@click.option(
    "--timeout-s",
    type=seconds(0, low_open=True),
    default=None,
    help="End the job as timeout after this long running.",
)
@click.option(
    "--delay-s",
    type=seconds(0),
    default=None,
    help="Hold the job (state scheduled) for this many seconds before it may run.",
)
@click.option(
    "--at",
    "at",
    type=Moment(),
    default=None,
    metavar="TIME",
    help="Hold the job until TIME: ISO 8601 (2030-01-01T03:00:00+01:00; no zone is UTC) or "
    "epoch seconds.",
)
@click.option(
    "--after",
    "after",
    multiple=True,
    metavar="ID",
    help="Wait (state waiting) until this invocation has succeeded; repeat for several parents.",
)
@click.option(
    "--after-failure",
    type=click.Choice(["cancel", "run"]),
    default="cancel",
    show_default=True,
    help="A parent that ends other than succeeded: cancel this job, or run it anyway.",
)
@click.option("--wait", "-w", is_flag=True, help="Wait for the outcome; exit status names it.")
@click.option(
    "--wait-timeout-s",
    type=seconds(0),
    default=24 * 3600.0,
    show_default=True,
    help="With --wait: give up after this long (exit 124; the job keeps going).",
)
@click.option(
    "--block-s",
    type=seconds(0),
    default=30.0,
    show_default=True,
    help="On a full queue with on_full: block, wait this long for room.",
)
@runtime_options
@plane_options
def submit(
    queue: str,
    workdir: str | None,
    requirements: str | None,
    with_: tuple[str, ...],
    nodes: int,
    hang_timeout_s: float | None,
    payload_json: str | None,
    payload_text: str | None,
    legacy_json: str | None,
    key: str | None,
    priority: float | None,
    max_attempts: int,
    timeout_s: float | None,
    delay_s: float | None,
    at: float | None,
    after: tuple[str, ...],
    after_failure: str,
    wait: bool,
    wait_timeout_s: float,
    block_s: float,
    url: str | None,
    token: str | None,
    namespace: str | None,
) -> None:
    """Submit one job to QUEUE (payload: --payload-json or --payload); prints its id."""
    value = _choose_payload(payload_text, payload_json, legacy_json)
    runtime = runtime_of(workdir, requirements, with_)
    if delay_s is not None and at is not None:
        raise click.UsageError("give --delay-s or --at, not both")
    with plane_session(url, token, namespace) as plane:
        q = SyncQueue(queue, dispatch=plane)
        inv_id = q.submit(
            value,
            key=key,
            priority=priority,
            max_attempts=max_attempts,
            timeout_s=timeout_s,
            block_s=block_s,
            delay_s=delay_s,
            at=at,
            after=list(after),
            after_failure=after_failure,
            runtime=runtime,
            nodes=nodes,
            hang_timeout_s=hang_timeout_s,
        )
        if not wait:
            click.echo(inv_id)
            return
        console = Console(stderr=True)
        inv = wait_for(plane, inv_id, wait_timeout_s, console)
    out = {
        "id": inv.id,
        "state": inv.state,
        "result": plain(preview(inv.result)) if inv.state == "succeeded" else None,
        "error": inv.error if inv.state != "succeeded" else None,
    }
    click.echo(json.dumps(out, sort_keys=True, default=str))
    if inv.state not in TERMINAL_STATES:
        console.print(f"# {inv.id} still {inv.state} after {span(wait_timeout_s)}", highlight=False)
        sys.exit(EXIT_STILL_RUNNING)
    if inv.state != "succeeded":
        console.print(f"# {inv.id} {inv.state}: {(inv.error or '').strip()}", highlight=False)
    sys.exit(exit_code(inv.state))
