"""Running one job body: the four UDF shapes, thunks, shell commands and raw payloads.

One function for the in-process worker loop and the daemon's child processes, so a body behaves
the same wherever it runs. Yields go to `emit` as they come; the return value is the result.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import subprocess
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from . import context, spill, tracing
from . import run as jobrun
from .attempt import AttemptLink, Preempted
from .envelope import Envelope, Thunk
from .errors import DispatchError
from .storage import Storage
from .workflow import substitute

Emit = Callable[[Any], None]
Handler = Callable[[Any], Any]

#: How many lines of stderr a failed shell command reports.
STDERR_TAIL = 20
#: A command that exits with this (EX_TEMPFAIL) asks to be run again later: a preemption.
EXIT_TEMPFAIL = 75
#: Names the file a command reads its preemption deadline from (see `run_command`).
DEADLINE_ENV = "LAKESHORE_PREEMPT_DEADLINE"


class NoHandler(DispatchError):
    code = "no_handler"


def run_body(
    payload: Any,
    emit: Emit,
    handler: Handler | None = None,
    *,
    inv_id: str | None = None,
    attempt: int = 1,
    storage: str | Storage | None = None,
    queue: str | None = None,
    link: AttemptLink | None = None,
    inputs: Mapping[str, bytes | None] | None = None,
) -> Any:
    """Run what a job carries and return its result; raises what the body raises.

    The body runs under the run its envelope carries (`dls.context`), so what it submits
    inherits its parent's run; a payload without one runs outside any run. Given `inv_id`, it
    also runs inside `dls.run`'s job context (id, attempt, `storage`, `emit` as `dls.run.post`).
    A spilled payload (or a spilled argument of a call) arrives as its Ref and is read back
    here, in the worker. A job (`inv_id` given) runs in its OpenTelemetry span when this
    process has loaded OpenTelemetry, a child of the producer's span when the envelope carries
    its context (sdk/tracing.py). `link` carries the attempt's checkpoints and preemption
    notice (`dls.run.checkpoint`, `dls.run.preempting`; attempt.py). `inputs`: the results
    of the parents its arguments name (`dls.output`, `Claim.inputs`), put in their place.
    """
    payload = spill.resolve(payload)
    envelope = payload if isinstance(payload, Envelope) else None
    with (
        _job(inv_id, attempt, emit, storage, queue, link),
        context.run(envelope.run if envelope else None),
        _span(envelope, inv_id, attempt, queue),
    ):
        if isinstance(payload, Thunk):
            payload = Envelope.for_thunk(payload)
        if isinstance(payload, Envelope):
            if payload.kind == "exec":
                return run_command(payload, emit)
            if payload.kind == "raw":
                return _call_handler(handler, payload.value, emit)
            assert payload.fn is not None  # checked when the envelope was built
            args, kwargs = spill.resolve_call(payload.args, payload.kwargs)
            args, kwargs = substitute(args, kwargs, inputs)
            return drive(payload.fn(*args, **kwargs), emit)
        return _call_handler(handler, payload, emit)


def _job(
    inv_id: str | None,
    attempt: int,
    emit: Emit,
    storage: str | Storage | None,
    queue: str | None,
    link: AttemptLink | None = None,
) -> contextlib.AbstractContextManager[Any]:
    if inv_id is None:
        return contextlib.nullcontext()
    return jobrun.job(inv_id, attempt, post=emit, storage=storage, queue=queue, link=link)


def _span(
    envelope: Envelope | None, inv_id: str | None, attempt: int, queue: str | None
) -> contextlib.AbstractContextManager[Any]:
    if inv_id is None or not tracing.active():
        return contextlib.nullcontext()  # no OpenTelemetry here: not even a generator's cost
    return tracing.job_span(
        envelope.trace if envelope else None,
        inv_id=inv_id,
        attempt=attempt,
        queue=queue,
        name=envelope.name if envelope else None,
    )


def _call_handler(handler: Handler | None, value: Any, emit: Emit) -> Any:
    if handler is None:
        raise NoHandler(
            "this worker has no handler for plain payloads: submit dls.thunk(...) or a @udf "
            "call, or start the worker with a handler (lakeshore-daemon --handler module:fn)"
        )
    return drive(handler(value), emit)


def drive(outcome: Any, emit: Emit) -> Any:
    """Turn whatever a body returned into (yields -> emit, return value -> result)."""
    if inspect.isgenerator(outcome):
        return _drain_generator(outcome, emit)
    if inspect.iscoroutine(outcome):
        return asyncio.run(outcome)
    if inspect.isasyncgen(outcome):
        return asyncio.run(_drain_async_generator(outcome, emit))
    return outcome


def _drain_generator(gen: Iterator[Any], emit: Emit) -> Any:
    while True:
        try:
            value = next(gen)
        except StopIteration as stop:
            return stop.value
        emit(value)


async def _drain_async_generator(agen: AsyncIterator[Any], emit: Emit) -> None:
    async for value in agen:
        emit(value)


def run_command(envelope: Envelope, emit: Emit) -> int:
    """Run a shell command; each output line is a frame, exit 0 succeeds.

    A preemption notice reaches the command as SIGTERM (as Slurm's `--signal` would): it has
    the daemon's preemption grace to save its state and exit; exiting 75 (EX_TEMPFAIL) asks
    to be run again, a preemption, not a failure. An environment variable cannot change once
    the command runs, so `LAKESHORE_PREEMPT_DEADLINE` names a file instead: absent until a
    notice, then (written before the SIGTERM) the deadline as epoch seconds.
    """
    assert envelope.command is not None
    with tempfile.TemporaryDirectory(prefix="lakeshore-exec-") as scratch:
        deadline_file = Path(scratch) / "preempt-deadline"
        env = {**(envelope.env or {}), DEADLINE_ENV: str(deadline_file)}
        code = _run_shell(envelope, env, deadline_file, emit)
    if code == EXIT_TEMPFAIL:
        raise Preempted(
            f"the command exited {EXIT_TEMPFAIL} (EX_TEMPFAIL): run it again later",
            cause="exit75",
        )
    return code


def _run_shell(envelope: Envelope, env: dict[str, str], deadline_file: Path, emit: Emit) -> int:
    """The command's exit code; raises `CommandFailed` for one neither 0 nor 75."""
    tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
    proc = subprocess.Popen(
        envelope.command or "",
        shell=True,
        cwd=envelope.cwd,
        env=_command_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    assert proc.stdout is not None
    _forward_notice(proc, deadline_file)
    with proc.stdout:  # closed also when emit raises (the job was ended while it ran)
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail.append(line)
            emit(line)
    code = proc.wait()
    if code not in (0, EXIT_TEMPFAIL):
        raise CommandFailed(code, list(tail))
    return code


def _forward_notice(proc: subprocess.Popen[str], deadline_file: Path) -> None:
    """On a preemption notice, write the deadline where `LAKESHORE_PREEMPT_DEADLINE` points
    (whole, by a rename: a reader never sees half of it), then SIGTERM the command (the shell
    execs a lone command)."""
    ctx = jobrun.current()
    if ctx is None or ctx.link is None:
        return
    import signal

    link = ctx.link

    def forward() -> None:
        deadline = link.deadline
        partial = deadline_file.with_suffix(".tmp")
        with contextlib.suppress(OSError):  # the command ended and its folder went with it
            partial.write_text("" if deadline is None else f"{deadline:.3f}\n")
            partial.replace(deadline_file)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)

    link.on_preempt(forward)


class CommandFailed(DispatchError):
    code = "command_failed"

    def __init__(self, exit_code: int, tail: list[str]) -> None:
        self.exit_code = exit_code
        super().__init__(f"command exited with {exit_code}; last output:\n" + "\n".join(tail))


def _command_env(extra: dict[str, str] | None) -> dict[str, str] | None:
    """The command's environment: the worker's, plus the envelope's `env`, plus the job span's
    context as TRACEPARENT / TRACESTATE (OpenTelemetry's environment carrier), so a traced
    program the command starts continues the job's trace. None (inherit) when nothing is added.
    """
    carrier = tracing.current_carrier()
    if extra is None and carrier is None:
        return None
    import os

    env = dict(os.environ)
    env.update((key.upper(), value) for key, value in (carrier or {}).items())
    env.update(extra or {})
    return env
