"""`lakeshore exec`: run a shell command on whichever daemon serves the queue.

The command rides as an exec envelope (plain msgpack, nothing pickled); the daemon runs it under
its shell with stdout and stderr merged, one frame per line. With --wait the lines stream back
here as they are posted and this command exits with the job's outcome, so
`lakeshore exec --wait -q training 'python train.py'` reads like running it locally.

The options are parsed strictly: the argv is cut at its first `--`, click parses what comes
before (an unknown or misspelt option is a usage error and nothing is submitted), and what comes
after is the command, word for word, its own `--flag`s included. Without `--` the command is the
words left over, which is meant for one quoted string.
"""

from __future__ import annotations

import shlex
import sys
import threading

import click

from dreamlake.lakeshore.envelope import Envelope
from dreamlake.lakeshore.errors import DispatchError
from dreamlake.lakeshore.plane.options import plane_options, plane_session
from dreamlake.lakeshore.queue import SyncQueue
from dreamlake.lakeshore.types import DEFAULT_QUEUE

from .params import Finite, seconds
from .runtime_options import runtime_of, runtime_options


def _env(pairs: tuple[str, ...]) -> dict[str, str] | None:
    env = {}
    for item in pairs:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--env")
        env[key] = value
    return env or None


class ExecCommand(click.Command):
    """`lakeshore exec`'s parser: strict before the first `--`, verbatim after it.

    A mistyped option must never become the start of a shell command that then runs on a
    worker, so nothing unknown is let through; and a command's own `--flag`s must reach it
    untouched, so click never parses what follows the first `--`.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" not in args:
            return self._strict(ctx, args)
        cut = args.index("--")
        before, after = args[:cut], args[cut + 1 :]
        if before and before[-1] in self._valued_options():
            # click would take the `--` as this option's value and run the rest as before
            raise click.BadOptionUsage(
                before[-1], f"Option '{before[-1]}' requires a value before --.", ctx
            )
        # click stops parsing options at `--` and hands every word after it over as it is
        rest = self._strict(ctx, [*before, "--", *after])
        if ctx.resilient_parsing:
            return rest
        words = tuple(ctx.params.get("command") or ())
        ahead = words[: len(words) - len(after)]
        if ahead:
            raise click.UsageError(
                f"the command is given both before -- ({shlex.join(ahead)}) and after it: "
                "put all of it after --, or give it as one quoted string without --",
                ctx,
            )
        return rest

    def _strict(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            guess = " or ".join(exc.possibilities or ())
            allowed = ", ".join(sorted(self._option_names()))
            raise click.NoSuchOption(
                exc.option_name,
                f"No such option: {exc.option_name}"
                + (f" (did you mean {guess}?)" if guess else "")
                + f". lakeshore exec takes {allowed}; a command's own options go after --: "
                "lakeshore exec [OPTIONS] -- CMD ARGS...",
                ctx=ctx,
            ) from None

    def _option_names(self) -> set[str]:
        return {
            max(p.opts, key=len)
            for p in self.params
            if isinstance(p, click.Option) and not p.hidden and p.opts
        }

    def _valued_options(self) -> set[str]:
        return {
            name
            for p in self.params
            if isinstance(p, click.Option) and not p.is_flag and not p.count
            for name in p.opts
        }


@click.command("exec", cls=ExecCommand)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--queue", "-q", default=DEFAULT_QUEUE, show_default=True, help="Queue to submit to.")
@click.option("--wait", "-w", is_flag=True, help="Stream the output here and exit with the job.")
@click.option(
    "--timeout-s",
    type=seconds(0, low_open=True),
    default=None,
    help="Kill the command after this many seconds (state timeout).",
)
@click.option("--cwd", default=None, help="Working directory on the worker.")
@click.option(
    "--env", "env", multiple=True, metavar="KEY=VALUE", help="Extra environment (repeat)."
)
@click.option("--key", default=None, help="Idempotency key: the same key returns the same job.")
@click.option("--priority", type=Finite(), default=0.0, show_default=True)
@click.option(
    "--max-attempts",
    type=click.IntRange(1, 1000),
    default=3,
    show_default=True,
    help="Runs allowed if a daemon dies mid-run (a non-zero exit is never retried).",
)
@click.option(
    "--result-timeout-s",
    type=seconds(0),
    default=None,
    help="With --wait: give up waiting after this long (the job keeps running).",
)
@runtime_options
@plane_options
def exec_(
    command: tuple[str, ...],
    queue: str,
    wait: bool,
    timeout_s: float | None,
    cwd: str | None,
    env: tuple[str, ...],
    key: str | None,
    priority: float,
    max_attempts: int,
    result_timeout_s: float | None,
    workdir: str | None,
    requirements: str | None,
    with_: tuple[str, ...],
    nodes: int,
    hang_timeout_s: float | None,
    url: str | None,
    token: str | None,
    namespace: str | None,
) -> None:
    """Submit COMMAND (one quoted string, or words after --) and print its invocation id.

    Options come before the command and are checked: a misspelt one is refused and nothing is
    submitted. Every word after -- is the command as given, its own options included:

        lakeshore exec -q training -- python train.py --lr 3

    With --workdir DIR, DIR ships and the command runs in a copy of it on the worker:

        lakeshore exec --workdir . -q training -- python train.py --lr 3e-4
    """
    line = command[0] if len(command) == 1 else shlex.join(command)
    runtime = runtime_of(workdir, requirements, with_)  # checked before anything is sent
    with plane_session(url, token, namespace) as plane:
        q = SyncQueue(queue, dispatch=plane)
        inv = q.submit(
            envelope=Envelope.for_exec(line, cwd=cwd, env=_env(env), timeout_s=timeout_s),
            key=key,
            priority=priority,
            max_attempts=max_attempts,
            runtime=runtime,
            nodes=nodes,
            hang_timeout_s=hang_timeout_s,
        )
        if not wait:
            click.echo(inv)
            return
        click.echo(f"# {inv} on {queue}: {line}", err=True)
        sys.exit(_follow(q, inv, result_timeout_s))


#: How often `exec --wait` reads the job's row for what its daemon is preparing.
PREPARING_POLL_S = 0.5


def _say_preparing(q: SyncQueue, inv: str, first_line: threading.Event) -> None:
    said = None
    while not first_line.wait(PREPARING_POLL_S):
        try:
            row = q.status(inv)
        except DispatchError:
            continue  # an outage: the stream says what matters
        if row.terminal:
            return
        words = (row.placement or {}).get("preparing") if row.state == "running" else None
        if words and words != said and not first_line.is_set():
            click.echo(f"# {inv}: {words}", err=True)
            said = words


def _follow(q: SyncQueue, inv: str, timeout_s: float | None) -> int:
    """Print each output line as it arrives; the exit status mirrors the job's outcome. Until
    the first line, what the daemon says it is preparing (its code, its environment) is
    printed to stderr as it changes."""
    window = timeout_s if timeout_s is not None else 24 * 3600.0
    first_line = threading.Event()
    sayer = threading.Thread(target=_say_preparing, args=(q, inv, first_line), daemon=True)
    sayer.start()
    try:
        for out in q.stream(inv, timeout=window):
            first_line.set()
            click.echo(out)
    except TimeoutError:
        click.echo(f"# {inv}: no output for {window:g}s; still {q.status(inv).state}", err=True)
        return 124
    except DispatchError:
        pass  # the ERROR frame: the row below says what happened
    finally:
        first_line.set()
        sayer.join()  # done with the plane before its session closes
    status = q.status(inv)
    if status.state == "succeeded":
        return 0
    click.echo(f"# {inv} {status.state}: {(status.error or '').strip()}", err=True)
    return 1
