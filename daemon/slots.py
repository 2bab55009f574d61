"""Slots: one warm child process per unit of concurrency, driven by one thread in the daemon.

Why children at all: a job is user code that may hang, leak, segfault, hold a CUDA context or
ignore signals. In a child it can be killed (kill, timeout, drain) and its GPU memory comes back
with the process; the daemon and the other slots carry on. Why spawn, not fork: a forked child of
a process that touched CUDA (or just holds threads and locks) is unsafe; spawn starts clean.

Why the parent does all plane traffic: the child holds no lease, no worker token (only its job's
own, which cannot settle or post: credentials.py) and none of the daemon's connections, so a
stale or runaway child can never settle or post; every frame and settle is fenced by the lease the
parent holds. The child only decodes, runs `run_body`, and writes messages on a pipe; those
messages and the child that writes them are in child.py. This module is the slot: the thread
that hands a child its job, reads what comes back, and is the one place its job is settled.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import time
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.context import SpawnContext
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
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
)

from . import hangs
from .child import Child, describe_exit
from .gang import GangPart
from .inventory import Gpu
from .log import get_logger
from .oom import OomCounters, death
from .preparing import Preparing
from .runtimes import JobRuntimes, Ready, RuntimeFailed

#: what the daemon buffers for a body that yields faster than the plane takes frames.
FRAME_BATCH = 256
#: The largest run message the assigning thread writes to a child itself (`_assigned`): it
#: fits an empty pipe (64 KiB on Linux), so the write never blocks that thread, which holds
#: the worker's bookkeeping lock. A bigger payload is sent by the slot thread, as before.
HAND_MAX_BYTES = 32 * 1024


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
        warm: bool = True,
        runtimes: JobRuntimes | None = None,
        gangs: Callable[[Claim], GangPart] | None = None,
    ) -> None:
        """`warm` False: no child until the slot's first job (slots past one per GPU, which
        a default daemon has up to its CPU count, cost no process while nobody shares).
        `gpus_for(claim)`: the GPUs a job was placed on (issue 34); a child that sees
        others is replaced before the job runs, since CUDA reads CUDA_VISIBLE_DEVICES once.
        None: the slot's `gpus` for every job.
        `oom`: the box's OOM-kill counters, to tell a job the kernel killed for memory from
        one that died otherwise (oom.py); None: every death is `died`.
        `runtimes`: the box's job runtimes (runtimes.py), which make a claim's bundle and
        environment ready before its child runs it; None: a job that brings one fails.
        `gangs(claim)`: a gang's part (gang.py), which waits for its gang's start and stops
        the run when the gang ends under it; None: a gang's part is released unrun."""
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
        self._warm = warm
        self._runtimes = runtimes
        self._gangs = gangs
        #: The gang's part this slot runs now (a notice to the slot is its gang's too).
        self._part: GangPart | None = None
        #: The current attempt's own working directory (runtimes.py `job_folder`), removed
        #: once the attempt ends.
        self._job_folder: Path | None = None
        self._log = get_logger(slot=index)

    def snapshot(self) -> dict[str, Any]:
        child = self._child
        pid = child.pid if child is not None else None
        state = "idle" if child is not None or not self._warm else "starting"
        return self._snapshot(state, self.gpu_indexes, pid)

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
        if claim.runtime is not None or child.runtime_key is not None:
            return  # its runtime is made ready (and checked against the child's) first
        if claim.gang is not None:
            return  # a gang's part waits for its gang's start, in a fresh child (`_run_part`)
        message = ForkingPickler.dumps(_run_message(claim, None))  # what Connection.send writes
        if len(message) > HAND_MAX_BYTES:
            return
        # The clock starts before the write: the child may start the body while this thread,
        # its write done, waits up to a GIL switch interval (5 ms) to run again, and a clock
        # read after that missed the run's first milliseconds (issue 45).
        handed_at = time.monotonic()
        try:
            with child.send_lock:
                child.conn.send_bytes(message)
        except OSError:
            return  # it died just now: the slot thread finds out and starts another
        self._handed = (claim.id, child, handed_at)

    def _aborted(self) -> None:
        if not self._closed:  # wake the slot thread out of its wait on the child
            with contextlib.suppress(BlockingIOError):
                os.write(self._wake_w, b"!")

    # -- the slot thread ---------------------------------------------------------------------

    def _serve(self) -> None:
        try:
            try:
                if self._warm:
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
                self._drop_job_folder()
                self._rewarm()
        finally:
            if self._child is not None:
                self._child.stop()
                self._child = None
            with self._lock:
                self._closed = True
                os.close(self._wake_r)
                os.close(self._wake_w)

    def _drop_job_folder(self) -> None:
        folder, self._job_folder = self._job_folder, None
        if folder is not None and self._runtimes is not None:
            self._runtimes.drop_job_folder(folder)

    def _rewarm(self) -> None:
        """A child was terminated or died: start the next one now, before the next claim.
        A slot that ran a job stays warm from then on."""
        self._warm = True
        if self._child is None:
            self._child = self._spawn()

    def _spawn(self, python: str | None = None) -> Child:
        child = Child.spawn(
            self._ctx, f"lakeshore-slot-{self.index}", self._handler, self._env, python
        )
        self._log.debug("slot.child_started", pid=child.pid, python=python)
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
        try:
            ready = self._make_ready(claim)
        except RuntimeFailed as exc:
            self._log.error("job.runtime_failed", invocation=claim.id, error=str(exc))
            return Outcome("error", error=str(exc), summary=str(exc)[:200], cause="runtime")
        if claim.gang is not None:
            return self._run_part(claim, ready)
        child = self._child_for(claim, ready)
        if handed is not None and handed[:2] == (claim.id, child):
            self._began = handed[2]
        else:
            shipped = self._shipped(claim, ready)
            self._began = time.monotonic()  # before the send, as in `_assigned`
            try:
                child.send(_run_message(claim, shipped))
            except OSError as exc:
                return self._retire(Outcome("died", error=f"the job's process was gone: {exc}"))
        child.ran = True
        if (noticed := self.noticed) is not None:
            with contextlib.suppress(OSError):  # after the run message, on the same pipe
                child.send(("preempt", noticed[0]))
        self._sink.post_resume(claim)
        return self._watch(claim, child)

    def _run_part(self, claim: Claim, ready: Ready | None) -> Outcome:
        """A gang's part (gang.py): its runtime ready first (while the others are claimed),
        then the gang's start, then a fresh child with the rendezvous, retired after."""
        if self._gangs is None:
            return Outcome("release", error="this daemon runs no gang parts")
        part = self._gangs(claim)
        env = part.start()
        if env is None:  # let go unstarted, or ended before it began: its lease is over
            return Outcome("lost", error="the gang did not start")
        if self._child is not None:  # a fresh child: a process group must not outlive its attempt
            self._child.stop()
            self._child = None
        child = self._child_for(claim, ready)
        paths, extra, folder = self._shipped(claim, ready) or ((), {}, None)
        self._began = time.monotonic()
        try:
            child.send(_run_message(claim, (paths, {**extra, **env}, folder)))
        except OSError as exc:
            return self._retire(Outcome("died", error=f"the job's process was gone: {exc}"))
        child.ran = True
        self._sink.post_resume(claim)
        if (noticed := self.noticed) is not None:  # a notice before the part started
            part.notice(noticed[0])
            with contextlib.suppress(OSError):
                child.send(("preempt", noticed[0]))
        self._part = part
        try:
            with part.running(
                child.pid,
                stop=lambda reason, why: self.abort(claim.id, reason, detail=why),
                tell=self._tell,
                post=lambda frames: self._sink.post_frames(claim, frames),
            ):
                outcome = self._watch(claim, child)
        finally:
            self._part = None
            hangs.forget(child.pid)
        return self._retire(outcome)

    def _make_ready(self, claim: Claim) -> Ready | None:
        """The claim's runtime made ready on this box (runtimes.py), before any child has the
        job; None for a job that brings none."""
        if claim.runtime is None:
            return None
        if self._runtimes is None:
            raise RuntimeFailed("this daemon runs no job runtimes (it was started without them)")
        with Preparing(self._runtimes.plane, claim, claim.runtime) as saying:
            ready = self._runtimes.ready(claim.runtime, on_progress=saying.progress)
        self._log.info(
            "job.runtime_ready",
            invocation=claim.id,
            runtime=ready.key,
            fetched=ready.fetched,
            fetched_bytes=ready.fetched_bytes,
            built=ready.built,
            ms=round(1000 * ready.seconds, 1),
        )
        return ready

    def _child_for(self, claim: Claim, ready: Ready | None = None) -> Child:
        """This slot's warm child, unless the job's GPUs differ from what it sees (CUDA reads
        CUDA_VISIBLE_DEVICES once: it is replaced), its runtime differs from the child's (a
        child holds the code of the jobs it ran: one that has run none takes any runtime of
        its interpreter), or it is gone (a fresh one)."""
        child = self._child
        wanted = self._gpus_of(claim)
        key = ready.key if ready is not None else None
        python = ready.python if ready is not None else None
        if wanted != self.gpus:
            self.gpus, self._env = wanted, self._child_env(wanted)
            if child is not None:
                child.stop()
                self._child = child = None
        if (
            child is not None
            and key != child.runtime_key
            and (child.ran or child.runtime_key is not None or child.python != python)
        ):
            child.stop()
            self._child = child = None
        if child is None or not child.alive():
            if child is not None:
                child.terminate(0.0)
            child = self._child = self._spawn(python)
        if key != child.runtime_key and ready is not None and self._runtimes is not None:
            child.holds.enter_context(self._runtimes.hold(ready))  # its tree stays while it lives
            child.runtime_key = key
        return child

    def _shipped(
        self, claim: Claim, ready: Ready | None
    ) -> tuple[tuple[str, ...], dict[str, str], str | None] | None:
        """The runtime part of a run message: the tree's paths, its variables, and the
        attempt's own working directory (made here, removed when the attempt ends)."""
        if ready is None or self._runtimes is None:
            return None
        self._job_folder = self._runtimes.job_folder(ready, claim.id, claim.attempt)
        folder = str(self._job_folder) if self._job_folder is not None else None
        return ready.sys_path, ready.env, folder

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
            if conn_fd in ready and self._part is not None:
                self._part.moved()  # a gang's part: whatever its child sends is a move
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
            if inv_id != claim.id or kind == "progress":
                continue  # a late message of an earlier job (impossible, never misfiled), a move
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

    def notice(self, deadline: float | None) -> None:
        """As every slot does; a gang's part also has its gang told (issue 47), so that every
        other part gets the grace too (rank 0 checkpoints before this part goes)."""
        super().notice(deadline)
        part = self._part
        if part is not None:
            part.notice(deadline)

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


def _run_message(claim: Claim, shipped: Any) -> tuple[Any, ...]:
    """What the child reads to run a job (`child_main`): with the job's own token, never the
    daemon's, the parents' results its arguments take (`dls.output`), and what its runtime
    shipped (`_shipped`)."""
    return (
        "run",
        claim.id,
        claim.payload,
        claim.attempt,
        claim.queue,
        claim.checkpoint,
        claim.job_token,
        claim.inputs,
        shipped,
    )
