"""A slot's child process, and the parent's handle on it: what runs in the spawned interpreter
and how the daemon starts, stops and kills it. Kept apart from the slot (slots.py), which decides
what a job's messages mean, because this is the part that must stay importable and correct in a
fresh interpreter that holds no lease, no plane and no daemon state.

The messages on the pipe:

    parent -> child   ("run", invocation id, payload bytes, attempt, queue, checkpoint, job token,
                       the parents' results its arguments take,
                       what its runtime shipped: (sys.path entries, variables, the attempt's
                       working directory) | None)
                      | None (exit)
    child -> parent   ("ready", pid) | ("fatal", text) once at start,
                      ("frame", id, encoded value)* then ("ok", id, encoded result)
                                           | ("error", id, (traceback, summary, cause))
                                           | ("preempted", id, (message, cause))

Issue 35 adds, while a job runs (childlink.py):

    child -> parent   ("checkpoint", id, encoded state)
    parent -> child   ("checkpointed", id, (encoded Ref, None) | (None, (code, message)))
                      ("preempt", deadline epoch seconds | None)

The child stores no checkpoint itself (it holds no lease): the parent writes it to storage and
its Ref to the row, then answers. A thread of the child reads the pipe, so a notice reaches the
job while its body runs.

Each child leads its own process group so that kill reaches what the job started too (a shell
command's processes); and it watches its parent's liveness so that a daemon killed with -9
takes its children, grandchildren included, down with it instead of leaving orphans that run on.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Mapping
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnContext, SpawnProcess
from typing import Any

from dreamlake.lakeshore.work.slot import error_outcome

from . import hangs
from .credentials import job_credentials

#: How long a fresh child may take to import and report ready (cold NFS homes are slow).
CHILD_START_TIMEOUT_S = 120.0
#: How long an idle child gets to exit on its own at shutdown before it is terminated.
CHILD_EXIT_S = 5.0
#: How long to wait for a SIGKILLed child to be reaped before moving on without it.
CHILD_KILL_WAIT_S = 10.0
#: Frames read from a child before they are posted: a batch when they come fast, and a bound on


class ChildFailed(RuntimeError):
    """A slot's child could not start (bad --handler, broken environment)."""


# -- the child ----------------------------------------------------------------------------------


def load_handler(spec: str) -> Callable[[Any], Any]:
    """`module:function` (dots allowed after the colon) to the callable it names."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--handler must look like module:function, got {spec!r}")
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"--handler {spec!r} is not callable")
    return target  # type: ignore[no-any-return]


def child_main(conn: Connection, handler_spec: str | None, env: Mapping[str, str]) -> None:
    """Entry point of a slot's child process (runs after spawn has imported this module)."""
    os.environ.update(env)  # before any job imports torch: CUDA reads it once, at init
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is the daemon's to handle
    with contextlib.suppress(OSError):
        os.setsid()
    _die_with_parent()
    _environment_first()
    _import_from_working_directory()
    from dreamlake.lakeshore import codec, spill
    from dreamlake.lakeshore.attempt import Preempted
    from dreamlake.lakeshore.execute import run_body

    from .childlink import ChildPipe

    try:
        handler = load_handler(handler_spec) if handler_spec else None
    except BaseException as exc:
        conn.send(("fatal", "".join(traceback.format_exception_only(exc)).strip()))
        return
    conn.send(("ready", os.getpid()))
    pipe = ChildPipe(conn)
    runtime = _JobRuntime()
    while (taken := pipe.next_job()) is not None:
        message, link = taken
        _, inv_id, payload, attempt, queue, _checkpoint, job_token, inputs, shipped = message
        runtime.enter(shipped)
        if os.environ.get(hangs.WATCHED):  # a gang's part watched for hangs (issue 47)
            hangs.register()

        def emit(value: Any, inv_id: str = inv_id) -> None:
            pipe.send(("frame", inv_id, spill.dumps(value)))  # a big frame rides as a Ref

        # The job's own token, for the body and for the spill of what it returns; gone after.
        with job_credentials(job_token):
            try:
                # dls.run in the body: this attempt, the daemon's --storage (LAKESHORE_STORAGE).
                result = run_body(
                    codec.decode(payload),
                    emit,
                    handler,
                    inv_id=inv_id,
                    attempt=attempt,
                    queue=queue,
                    link=link,
                    inputs=inputs,
                )
                reply: tuple[str, str, Any] = ("ok", inv_id, spill.dumps(result))
            except Preempted as exc:
                reply = ("preempted", inv_id, (str(exc), exc.cause))
            except BaseException as exc:  # SystemExit from a job is a failed job, not our exit
                failed = error_outcome(exc)  # a MemoryError: out of host memory, `oom`
                reply = ("error", inv_id, (failed.error, failed.summary, failed.cause))
        try:
            pipe.send(reply)
        except OSError:
            return


class _JobRuntime:
    """What the child's jobs brought (issue 46; daemon/runtimes.py): the shipped tree's
    `python/` on `sys.path` and the runtime's variables, taken once, at the first job (the
    slot sends a child jobs of one runtime only), and each job's own working directory, its
    current directory and first `sys.path` entry while it runs."""

    def __init__(self) -> None:
        self.adopted = False
        self.workdir: str | None = None
        self.home = os.getcwd()

    def enter(self, shipped: tuple[tuple[str, ...], dict[str, str], str | None] | None) -> None:
        if shipped is None:
            return
        paths, env, workdir = shipped
        if not self.adopted:
            self.adopted = True
            sys.path[0:0] = [p for p in paths if p not in sys.path]
            os.environ.update(env)
        if self.workdir is not None and self.workdir in sys.path:
            sys.path.remove(self.workdir)
        self.workdir = workdir
        if workdir is not None:
            sys.path.insert(0, workdir)
            os.chdir(workdir)
        else:
            os.chdir(self.home)


def _environment_first() -> None:
    """Spawn hands a child its parent's `sys.path`, whatever interpreter runs it: a child on a
    job's environment (runtimes.py) puts that environment's site-packages back, first, so the
    job's requirements are what it imports (the daemon's own packages stay behind them, and
    the build's constraints keep the two from disagreeing)."""
    import site

    own = [p for p in site.getsitepackages() if p not in sys.path]
    if not own:
        return  # the daemon's own interpreter
    sys.path[0:0] = own
    for path in own:
        site.addsitedir(path)  # its .pth files (the entries are on the path already)
    # and a command the job runs (`python train.py`, a console script) finds them too
    os.environ["VIRTUAL_ENV"] = sys.prefix
    os.environ["PATH"] = os.pathsep.join(
        [os.path.dirname(sys.executable), os.environ.get("PATH", "")]
    )


def _import_from_working_directory() -> None:
    """`--handler handlers:reply` and the udfs of your own modules import from the daemon's
    working directory, as under `python -m` (the `lakeshore-daemon` script's path holds only
    its own folder)."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def _die_with_parent() -> None:
    """Kill this child's whole process group the moment the daemon is gone (even by -9)."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    sentinel = parent.sentinel

    def watch() -> None:
        multiprocessing.connection.wait([sentinel])
        if os.getpgid(0) == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="lakeshore-parent-watch", daemon=True).start()


# -- the parent's handle on one child ------------------------------------------------------------


class Child:
    """A started child process and its pipe."""

    def __init__(self, process: SpawnProcess, conn: Connection, python: str | None) -> None:
        self.process = process
        self.conn = conn
        #: Held by a write from a thread other than the slot's (a notice) and by the slot's
        #: own writes while a job runs, so two messages never interleave on the pipe.
        self.send_lock = threading.Lock()
        #: The interpreter it runs (a job environment's; None: the daemon's), the runtime it
        #: took at its first job (daemon/runtimes.py `runtime_key`), whether it has run one,
        #: and what it holds while alive (its runtime's tree, kept from eviction).
        self.python = python
        self.runtime_key: str | None = None
        self.ran = False
        self.holds = contextlib.ExitStack()

    def send(self, message: Any) -> None:
        with self.send_lock:
            self.conn.send(message)

    @classmethod
    def spawn(
        cls,
        ctx: SpawnContext,
        name: str,
        handler: str | None,
        env: Mapping[str, str],
        python: str | None = None,
    ) -> Child:
        """`python`: the interpreter of a job's environment (None: the daemon's)."""
        parent_end, child_end = ctx.Pipe(duplex=True)
        # Not a daemonic process: jobs must be free to start their own (DataLoader workers).
        process = ctx.Process(
            target=child_main, args=(child_end, handler, dict(env)), name=name, daemon=False
        )
        with _interpreter(ctx, python):
            process.start()
        child_end.close()
        child = cls(process, parent_end, python)
        child._await_ready()
        return child

    def _await_ready(self) -> None:
        ready = multiprocessing.connection.wait(
            [self.conn, self.process.sentinel], CHILD_START_TIMEOUT_S
        )
        message: Any = None
        if self.conn in ready:
            with contextlib.suppress(EOFError, OSError):
                message = self.conn.recv()
        if isinstance(message, tuple) and message[0] == "ready":
            return
        self.terminate(0.0)
        if isinstance(message, tuple) and message[0] == "fatal":
            raise ChildFailed(str(message[1]))
        raise ChildFailed(
            f"the slot's child process did not start (exit code {self.process.exitcode})"
        )

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.is_alive()

    def terminate(self, grace_s: float) -> None:
        """SIGTERM the child's process group, SIGKILL what is left after `grace_s`."""
        pid = self.process.pid
        if pid is not None and self.process.exitcode is None:
            _signal_group(pid, signal.SIGTERM)
            self.process.join(grace_s)
            if self.process.exitcode is None:
                _signal_group(pid, signal.SIGKILL)
                self.process.join(
                    CHILD_KILL_WAIT_S
                )  # only a process stuck in the kernel outlasts it
        if pid is not None:
            _signal_group(pid, signal.SIGKILL)  # grandchildren that outlived it
        self.close()

    def stop(self) -> None:
        """Ask an idle child to exit; terminate it if it does not."""
        with contextlib.suppress(OSError):
            self.conn.send(None)
        self.process.join(CHILD_EXIT_S)
        self.terminate(1.0)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.close()
        self.holds.close()


#: Spawn reads its interpreter from one process-wide setting: slots starting children of
#: different environments at once take turns.
_INTERPRETER_LOCK = threading.Lock()


@contextlib.contextmanager
def _interpreter(ctx: SpawnContext, python: str | None) -> Iterator[None]:
    if python is None:
        with _INTERPRETER_LOCK:
            yield
        return
    with _INTERPRETER_LOCK:
        ctx.set_executable(python)
        try:
            yield
        finally:
            ctx.set_executable(sys.executable)


def _signal_group(pid: int, sig: int) -> None:
    """Signal the child's group (it called setsid); fall back to the child alone."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    except PermissionError:  # the group id was not ours (setsid not reached yet)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "unknown exit"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        hint = " (the kernel's OOM killer sends SIGKILL)" if -exitcode == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exited with code {exitcode}"


def spawn_context() -> SpawnContext:
    return multiprocessing.get_context("spawn")
