"""Slots: one warm child process per unit of concurrency, driven by one thread in the daemon.

Why children at all: a job is user code that may hang, leak, segfault, hold a CUDA context or
ignore signals. In a child it can be killed (kill, timeout, drain) and its GPU memory comes back
with the process; the daemon and the other slots carry on. Why spawn, not fork: a forked child of
a process that touched CUDA (or just holds threads and locks) is unsafe; spawn starts clean.

Why the parent does all plane traffic: the child holds no lease, no worker token (only its job's
own, which cannot settle or post: credentials.py) and none of the daemon's connections, so a
stale or runaway child can never settle or post; every frame and settle is fenced by the lease the
parent holds. The child only decodes, runs `run_body`, and writes messages on a pipe:

    parent -> child   ("run", invocation id, payload bytes, attempt, queue, checkpoint, job token,
                       the parents' results its arguments take)
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
import math
import multiprocessing
import multiprocessing.connection
import os
import select
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnContext, SpawnProcess
from multiprocessing.reduction import ForkingPickler
from typing import Any

from dreamlake.lakeshore.errors import DispatchError
from dreamlake.lakeshore.types import Claim
from dreamlake.lakeshore.work.slot import (
    ABORT_CAUSES,
    AbortReason,
    JobSink,
    Outcome,
    SlotBase,
    abort_outcome,
    crash_outcome,
    error_outcome,
)

from .credentials import job_credentials
from .inventory import Gpu
from .log import get_logger
from .oom import OomCounters, death

#: How long a fresh child may take to import and report ready (cold NFS homes are slow).
CHILD_START_TIMEOUT_S = 120.0
#: How long an idle child gets to exit on its own at shutdown before it is terminated.
CHILD_EXIT_S = 5.0
#: How long to wait for a SIGKILLed child to be reaped before moving on without it.
CHILD_KILL_WAIT_S = 10.0
#: Frames read from a child before they are posted: a batch when they come fast, and a bound on
#: what the daemon buffers for a body that yields faster than the plane takes frames.
FRAME_BATCH = 256
#: The largest run message the assigning thread writes to a child itself (`_assigned`): it
#: fits an empty pipe (64 KiB on Linux), so the write never blocks that thread, which holds
#: the worker's bookkeeping lock. A bigger payload is sent by the slot thread, as before.
HAND_MAX_BYTES = 32 * 1024


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
    while (taken := pipe.next_job()) is not None:
        message, link = taken
        _, inv_id, payload, attempt, queue, _checkpoint, job_token, inputs = message

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

    def __init__(self, process: SpawnProcess, conn: Connection) -> None:
        self.process = process
        self.conn = conn
        #: Held by a write from a thread other than the slot's (a notice) and by the slot's
        #: own writes while a job runs, so two messages never interleave on the pipe.
        self.send_lock = threading.Lock()

    def send(self, message: Any) -> None:
        with self.send_lock:
            self.conn.send(message)

    @classmethod
    def spawn(
        cls, ctx: SpawnContext, name: str, handler: str | None, env: Mapping[str, str]
    ) -> Child:
        parent_end, child_end = ctx.Pipe(duplex=True)
        # Not a daemonic process: jobs must be free to start their own (DataLoader workers).
        process = ctx.Process(
            target=child_main, args=(child_end, handler, dict(env)), name=name, daemon=False
        )
        process.start()
        child_end.close()
        child = cls(process, parent_end)
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


# -- the slot -------------------------------------------------------------------------------------


class ProcessSlot(SlotBase):
    """One unit of concurrency: a thread in the daemon that owns one warm child process.

    The slot thread is the only one that settles its job, so a kill request, a timeout, a
    death and a finished job can never settle twice: the other threads only *ask* (`abort`)
    and the slot decides, in order, on one thread. It also owns the child, with one exception:
    the thread that assigns a job hands it to a warm, idle child itself (`_assigned`), so the
    child starts on it while the slot thread wakes up to wait for it.
    """

    def __init__(
        self,
        index: int,
        *,
        ctx: SpawnContext,
        sink: JobSink,
        handler: str | None,
        gpus: Sequence[Gpu] = (),
        env: Mapping[str, str] | None = None,
        kill_grace_s: float = 10.0,
        gpus_for: Callable[[Claim], Sequence[Gpu]] | None = None,
        oom: OomCounters | None = None,
    ) -> None:
        """`gpus_for(claim)`: the GPUs a job was placed on (issue 34); a child that sees
        others is replaced before the job runs, since CUDA reads CUDA_VISIBLE_DEVICES once.
        None: the slot's `gpus` for every job.
        `oom`: the box's OOM-kill counters, to tell a job the kernel killed for memory from
        one that died otherwise (oom.py); None: every death is `died`."""
        super().__init__(index, kill_grace_s=kill_grace_s)
        self._gpus_for = gpus_for
        #: The GPUs the slot's child sees (its CUDA_VISIBLE_DEVICES).
        self.gpus = list(gpus)
        self._ctx = ctx
        self._sink = sink
        self._handler = handler
        self._base_env = {"LAKESHORE_SLOT": str(index), **(env or {})}
        self._env = self._child_env(self.gpus)
        self._wake_r, self._wake_w = os.pipe()
        self._closed = False
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._child: Child | None = None
        #: The child the slot thread last waited on, with its poll object (`_poller`).
        self._polled: tuple[Child, select.poll] | None = None
        #: The job whose run message `_assigned` already wrote, to which child, and when: the
        #: attempt's clock (its timeout, its run time) starts when its child got the job.
        self._handed: tuple[str, Child, float] | None = None
        self._oom = oom
        #: The OOM-kill counters as the current attempt was assigned (oom.py; `_assigned`).
        self._oom_before: dict[str, int] = {}
        self._log = get_logger(slot=index)

    def snapshot(self) -> dict[str, Any]:
        child = self._child
        pid = child.pid if child is not None else None
        return self._snapshot("idle" if child is not None else "starting", self.gpu_indexes, pid)

    @property
    def gpu_indexes(self) -> list[int]:
        return [g.index for g in self.gpus]

    def _child_env(self, gpus: Sequence[Gpu]) -> dict[str, str]:
        """A child's environment: the slot's, and the GPUs it sees. A placed job with no GPU
        sees none (an empty CUDA_VISIBLE_DEVICES), not every GPU of the box."""
        env = dict(self._base_env)
        if gpus or self._gpus_for is not None:
            env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # the order nvidia-smi numbers them
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g.index) for g in gpus)
            env["LAKESHORE_GPUS"] = env["CUDA_VISIBLE_DEVICES"]  # dls.run.gpus
        return env

    def _gpus_of(self, claim: Claim) -> list[Gpu]:
        return self.gpus if self._gpus_for is None else list(self._gpus_for(claim))

    def _assigned(self, claim: Claim) -> None:
        # The OOM-kill counters as the job starts, before any child can have it: a job that
        # dies at once must find its own kill counted after this reading, never in it.
        self._oom_before = self._oom.baseline() if self._oom is not None else {}
        # Between jobs the slot thread leaves the child alone: a child it replaces is None here
        # until the new one is up, and then it is the one the slot thread runs the job on.
        child = self._child
        if child is None or not child.alive() or self._gpus_of(claim) != self.gpus:
            return  # the slot thread starts a new one and sends the job itself
        message = ForkingPickler.dumps(_run_message(claim))  # what Connection.send writes
        if len(message) > HAND_MAX_BYTES:
            return
        try:
            with child.send_lock:
                child.conn.send_bytes(message)
        except OSError:
            return  # it died just now: the slot thread finds out and starts another
        self._handed = (claim.id, child, time.monotonic())

    def _aborted(self) -> None:
        if not self._closed:  # wake the slot thread out of its wait on the child
            with contextlib.suppress(BlockingIOError):
                os.write(self._wake_w, b"!")

    # -- the slot thread ---------------------------------------------------------------------

    def _serve(self) -> None:
        try:
            try:
                self._child = self._spawn()
            except BaseException as exc:
                self.start_error = exc
                return
            finally:
                self.started.set()
            while True:
                claim = self._inbox.get()
                if claim is None:
                    return
                self._began = time.monotonic()
                outcome = self._run_safely(claim)
                self._end(self._sink, claim, outcome)
                self._rewarm()
        finally:
            if self._child is not None:
                self._child.stop()
                self._child = None
            with self._lock:
                self._closed = True
                os.close(self._wake_r)
                os.close(self._wake_w)

    def _rewarm(self) -> None:
        """A child was terminated or died: start the next one now, before the next claim."""
        if self._child is None:
            self._child = self._spawn()

    def _spawn(self) -> Child:
        child = Child.spawn(self._ctx, f"lakeshore-slot-{self.index}", self._handler, self._env)
        self._log.debug("slot.child_started", pid=child.pid)
        return child

    def _run_safely(self, claim: Claim) -> Outcome:
        """Whatever goes wrong around one job ends that attempt (counted), never the daemon."""
        try:
            return self._run(claim)
        except Exception as exc:
            self._log.error("slot.job_crashed", invocation=claim.id, error=repr(exc))
            return self._retire(crash_outcome(exc))

    def _run(self, claim: Claim) -> Outcome:
        handed, self._handed = self._handed, None
        child = self._child_for(claim)
        if handed is not None and handed[:2] == (claim.id, child):
            self._began = handed[2]
        else:
            try:
                child.send(_run_message(claim))
            except OSError as exc:
                return self._retire(Outcome("died", error=f"the job's process was gone: {exc}"))
            self._began = time.monotonic()
        if (noticed := self.noticed) is not None:
            with contextlib.suppress(OSError):  # after the run message, on the same pipe
                child.send(("preempt", noticed[0]))
        self._sink.post_resume(claim)
        return self._watch(claim, child)

    def _child_for(self, claim: Claim) -> Child:
        """This slot's warm child, unless the job's GPUs differ from what it sees (CUDA reads
        CUDA_VISIBLE_DEVICES once: it is replaced) or it is gone (a fresh one)."""
        child = self._child
        wanted = self._gpus_of(claim)
        if wanted != self.gpus:
            self.gpus, self._env = wanted, self._child_env(wanted)
            if child is not None:
                child.stop()
                self._child = child = None
        if child is None or not child.alive():
            if child is not None:
                child.terminate(0.0)
            child = self._child = self._spawn()
        return child

    def _watch(self, claim: Claim, child: Child) -> Outcome:
        """Until the job ends: its frames and outcome, an end asked for, or its timeout."""
        deadline = self._run_deadline(claim, self._began)
        poller, conn_fd, exit_fd = self._poller(child), child.conn.fileno(), child.process.sentinel
        # The wake pipe may hold bytes from before this job: drained at the first look if so.
        woken = self._wake_r in self._ready(child)
        while True:
            # Before every wait: an end asked for after the last look has its byte on the
            # wake pipe (drained here, first), so no request falls between look and wait.
            abort = self._take_abort(claim.id, drain=woken)
            if abort is not None:
                reason, grace = abort
                if reason in ABORT_CAUSES:
                    self._sink.note_cause(claim, ABORT_CAUSES[reason])
                child.terminate(grace)
                self._child = None
                return abort_outcome(reason, self._abort_detail)
            if (timed_out := self._timed_out(claim, deadline)) is not None:
                self._sink.note_cause(claim, "timeout")
                child.terminate(self.kill_grace_s)
                self._child = None
                return timed_out
            wait_s = self._until(deadline)
            ready = {
                fd for fd, _ in poller.poll(None if wait_s is None else math.ceil(1000 * wait_s))
            }
            woken = self._wake_r in ready
            if conn_fd in ready or exit_fd in ready:
                outcome = self._read(claim, child)
                if outcome is not None:
                    return outcome

    def _poller(self, child: Child) -> select.poll:
        """One poll object per child (its pipe, its exit, the slot's wake pipe), made when the
        child is first waited on: `multiprocessing.connection.wait` built and tore down a
        selector for every wait, several times the cost of the wait itself."""
        if self._polled is None or self._polled[0] is not child:
            poller = select.poll()
            for fd in (child.conn.fileno(), child.process.sentinel, self._wake_r):
                poller.register(fd, select.POLLIN)
            self._polled = (child, poller)
        return self._polled[1]

    def _ready(self, child: Child) -> set[int]:
        """The waited-on descriptors that are ready now, without waiting. The same poll object
        as the waits: the `child.conn.poll()` it replaces built a selector for every look, a
        fifth of the daemon's Python time on a no-op job."""
        return {fd for fd, _ in self._poller(child).poll(0)}

    def _read(self, claim: Claim, child: Child) -> Outcome | None:
        """Take what waits on the pipe (a batch at most); the outcome once the job has ended."""
        frames: list[bytes] = []
        outcome: Outcome | None = None
        dead = False
        while outcome is None and len(frames) < FRAME_BATCH:
            try:
                if child.conn.fileno() not in self._ready(child):
                    break  # nothing more on the pipe (its end shows as ready: recv raises)
                kind, inv_id, value = child.conn.recv()
            except (EOFError, OSError):
                dead = True
                break
            if inv_id != claim.id:
                continue  # a late message of an earlier job: impossible, but never misfile it
            if kind == "frame":
                frames.append(value)
            elif kind == "checkpoint":  # the frames before it go first, in order
                refused = self._flush(claim, child, frames)
                if refused is not None:
                    return refused
                self._checkpoint(claim, child, value)
            else:
                outcome = _ended(kind, value)
        refused = self._flush(claim, child, frames)
        if refused is not None:
            return refused
        if outcome is not None:
            return outcome
        if dead or (not child.alive() and child.conn.fileno() not in self._ready(child)):
            child.process.join(1.0)
            exitcode = child.process.exitcode
            return self._retire(death(exitcode, self._oom, self._oom_before, describe_exit))
        return None

    def _flush(self, claim: Claim, child: Child, frames: list[bytes]) -> Outcome | None:
        """Post `frames` (and empty the list); the outcome that ends the job if refused."""
        refused = self._sink.post_frames(claim, frames) if frames else None
        frames.clear()
        if refused is not None:
            child.terminate(self.kill_grace_s)
            self._child = None
        return refused

    def _checkpoint(self, claim: Claim, child: Child, data: bytes) -> None:
        """Store a checkpoint the child sent, then answer it (the child waits for the answer)."""
        started = time.perf_counter()
        try:
            answer: tuple[bytes | None, tuple[str, str] | None] = (
                self._sink.checkpoint(claim, data),
                None,
            )
        except DispatchError as exc:
            answer = (None, (exc.code, str(exc)))
        except Exception as exc:  # storage trouble of any kind: the job hears it, not the daemon
            answer = (None, ("storage_error", f"the checkpoint was not stored: {exc!r}"))
        with contextlib.suppress(OSError):  # a child that died meanwhile is found next
            child.send(("checkpointed", claim.id, answer))
        self._log.debug(
            "job.checkpointed",
            invocation=claim.id,
            bytes=len(data),
            ms=round(1000 * (time.perf_counter() - started), 2),
            error=answer[1][1] if answer[1] else None,
        )

    def _tell(self, deadline: float | None) -> None:
        """Pass a preemption notice to the running job's child (`dls.run.preempting`). One
        that comes before the child has its job is told again once it has (`_run`)."""
        child = self._child
        if child is None or not self.busy:
            return
        with contextlib.suppress(OSError):
            child.send(("preempt", deadline))

    def _retire(self, outcome: Outcome) -> Outcome:
        if self._child is not None:
            self._child.terminate(0.0)
            self._child = None
        return outcome

    def _take_abort(self, inv_id: str, *, drain: bool = True) -> tuple[AbortReason, float] | None:
        """The end asked for `inv_id`, if any. `drain`: empty the wake pipe first (skipped
        when the last wait saw nothing on it: a byte written since makes the next wait return
        at once, and is drained then)."""
        if drain:
            self._drain_wake()
        with self._lock:
            if self._abort is None or self._abort[0] != inv_id:
                return None
            _, reason, grace = self._abort
            return reason, grace

    def _drain_wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_r, 512):
                pass


def _ended(kind: str, value: Any) -> Outcome:
    """The outcome a child's last message of a job says."""
    if kind == "ok":
        return Outcome("ok", result=value)
    if kind == "preempted":
        message, cause = value
        return Outcome("preempted", error=str(message), cause=str(cause))
    text, summary, cause = value
    return Outcome("error", error=str(text), summary=str(summary), cause=str(cause))


def _run_message(
    claim: Claim,
) -> tuple[str, str, bytes, int, str, bytes | None, str | None, dict[str, bytes | None] | None]:
    """What the child reads to run a job (`child_main`): with the job's own token, never the
    daemon's, and the parents' results its arguments take (`dls.output`)."""
    return (
        "run",
        claim.id,
        claim.payload,
        claim.attempt,
        claim.queue,
        claim.checkpoint,
        claim.job_token,
        claim.inputs,
    )


def spawn_context() -> SpawnContext:
    return multiprocessing.get_context("spawn")
