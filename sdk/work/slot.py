"""What a slot is to the worker core: one unit of concurrency that runs one job at a time.

The core claims, renews, settles and drains; a slot only runs a body and reports how it ended.
Two kinds exist: the daemon's process slots (daemon/slots.py: a warm child per slot, killable)
and the inline slots of `run_worker` (inline.py: a thread per job in the calling process).
"""

from __future__ import annotations

import abc
import queue
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast

from dreamlake.lakeshore.types import Claim

OutcomeKind = Literal["ok", "error", "died", "killed", "timeout", "release", "lost", "preempted"]
#: Why another thread ends a running job: a kill asked, its worker stopping, its lease gone;
#: on a daemon also its GPU memory over its share, or a GPU of its failing (gpuwatch.py).
AbortReason = Literal["killed", "release", "lost", "gpu_memory", "gpu_failed", "hung"]

#: A wait on a job's deadline is cut into pieces no longer than this: select() and friends
#: refuse timeouts past ~24.8 days (a C int of milliseconds), and a 30-day training run is a
#: plausible `timeout_s`.
DEADLINE_WAIT_CHUNK_S = 3600.0


@dataclass(frozen=True)
class Outcome:
    """How an attempt ended, as the slot saw it; the core turns it into a settle."""

    kind: OutcomeKind
    result: bytes | None = None
    error: str = ""
    #: One line for the log (the exception type and message); `error` is what the row keeps.
    summary: str = ""
    #: A preempted attempt's cause (types.END_CAUSES): a notice, a command exiting 75, a GPU
    #: that failed. A failed one's when it is not the usual (`died` / `error`): `oom` (out of
    #: host memory), `gpu_memory` (over its share under --enforce-gpu-memory).
    cause: str = "notice"


class JobSink(Protocol):
    """The core's side: the only place frames and settles reach the plane."""

    def post_frames(self, claim: Claim, frames: Sequence[bytes]) -> Outcome | None:
        """Post VALUE frames in order; the outcome that ends the job when one was refused."""

    def settle(self, claim: Claim, outcome: Outcome) -> None: ...

    def slot_free(self, slot: Slot) -> None: ...

    def job_ended(self, claim: Claim, outcome: Outcome, run_s: float) -> None:
        """An attempt's run ended after `run_s` seconds in its slot (before its settle)."""

    def checkpoint(self, claim: Claim, data: bytes) -> bytes | None:
        """Store `data` as the job's checkpoint (issue 35); the encoded Ref its row now holds.
        Raises a `DispatchError` saying why it was refused (the previous one then stays)."""

    def post_resume(self, claim: Claim) -> None:
        """Mark in the journal that this attempt takes the job up again (a RESUME frame)."""

    def note_cause(self, claim: Claim, cause: str) -> None:
        """Record on the row why the slot is about to end the attempt, before it signals the
        job (issue 35); best effort, and never long: the kill does not wait on an outage."""


class Slot(Protocol):
    """The slot side, called from the core's threads; only the slot's own thread settles."""

    index: int
    started: threading.Event
    start_error: BaseException | None

    def start(self, run_thread: Callable[[str, Callable[[], None]], threading.Thread]) -> None:
        """Start the slot's thread through the core's watcher (a crash stops the worker)."""

    def assign(self, claim: Claim) -> None: ...

    def abort(
        self, inv_id: str, reason: AbortReason, grace_s: float | None = None, detail: str = ""
    ) -> bool:
        """Ask the slot to end `inv_id` now; False if it is no longer the slot's job. `detail`:
        the error the job ends with, where the reason's own words say too little."""

    def notice(self, deadline: float | None) -> None:
        """Tell the running job its box is going away by `deadline` (`dls.run.preempting`)."""

    def close(self) -> None:
        """Let the slot's thread exit once its current job is done."""

    def join(self, timeout: float | None = None) -> None: ...

    @property
    def claim(self) -> Claim | None: ...

    @property
    def busy(self) -> bool: ...

    def snapshot(self) -> dict[str, Any]: ...


#: Builds slot `index` reporting to `sink`.
SlotFactory = Callable[[int, JobSink], Slot]


class SlotBase(abc.ABC):
    """What every kind of slot keeps: one claim at a time, the request to end it, the inbox its
    thread reads. A kind runs bodies on that thread (`_serve`) and is told when an end is asked
    for (`_aborted`, under the lock) so that it can wake what waits on the body."""

    def __init__(self, index: int, *, kill_grace_s: float = 0.0) -> None:
        self.index = index
        self.kill_grace_s = kill_grace_s
        self.started = threading.Event()
        self.start_error: BaseException | None = None
        self._inbox: queue.SimpleQueue[Claim | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._claim: Claim | None = None
        self._since = 0.0
        #: When the running attempt's body started (monotonic): its run time is measured from it.
        self._began = 0.0
        #: (invocation id, why, grace): what other threads asked of the running job.
        self._abort: tuple[str, AbortReason, float] | None = None
        #: The error an abort asked the job to end with ("": the reason's own words).
        self._abort_detail = ""
        self._thread: threading.Thread | None = None
        self._noticed: tuple[float | None] | None = None

    thread_name = "lakeshore-slot"

    def start(self, run_thread: Callable[[str, Callable[[], None]], threading.Thread]) -> None:
        """Start the slot's thread through the core's watcher (a crash stops the worker)."""
        self._thread = run_thread(f"{self.thread_name}-{self.index}", self._serve)

    def assign(self, claim: Claim) -> None:
        with self._lock:
            if self._claim is not None:
                raise RuntimeError(f"slot {self.index} is busy")
            self._claim, self._since, self._abort = claim, time.time(), None
        self._assigned(claim)
        self._inbox.put(claim)

    def _assigned(self, claim: Claim) -> None:
        """Called on the assigning thread before the slot's thread hears of `claim`: a kind may
        start the job from there, while its own thread wakes. Nothing, by default."""
        return None

    def abort(
        self, inv_id: str, reason: AbortReason, grace_s: float | None = None, detail: str = ""
    ) -> bool:
        """Ask the slot to end `inv_id` now; ignored if it is no longer the slot's job."""
        with self._lock:
            if self._claim is None or self._claim.id != inv_id or self._abort is not None:
                return False
            self._abort = (inv_id, reason, self.kill_grace_s if grace_s is None else grace_s)
            self._abort_detail = detail
            self._aborted()
        return True

    def close(self) -> None:
        """Let the slot's thread exit once its current job is done."""
        self._inbox.put(None)

    def notice(self, deadline: float | None) -> None:
        """Tell the running job its box is going away by `deadline`; kept for a job the slot
        starts after it (`noticed`), which is told as it starts."""
        with self._lock:
            self._noticed = (deadline,)
        self._tell(deadline)

    @property
    def noticed(self) -> tuple[float | None] | None:
        """The notice this slot was given, if any: (its deadline,)."""
        with self._lock:
            return self._noticed

    def _tell(self, deadline: float | None) -> None:
        """Pass a notice to the running job, if the kind can (by default it is not told, and
        the end of the grace ends it)."""
        return None

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def claim(self) -> Claim | None:
        with self._lock:
            return self._claim

    @property
    def busy(self) -> bool:
        return self.claim is not None

    def _snapshot(self, idle: str, gpus: list[int], pid: int | None) -> dict[str, Any]:
        with self._lock:
            claim, since = self._claim, self._since
        return {
            "index": self.index,
            "state": "busy" if claim else idle,
            "invocation": claim.id if claim else None,
            "queue": claim.queue if claim else None,
            "attempt": claim.attempt if claim else None,
            "since": since if claim else None,
            "gpus": gpus,
            "pid": pid,
        }

    # -- the run timeout: every kind of slot times its jobs here --------------------------------

    @staticmethod
    def _run_deadline(claim: Claim, began: float) -> float | None:
        """When the attempt runs out of time (`time.monotonic()`): `began`, when its body got
        the job, plus its timeout_s; None without one."""
        return None if claim.timeout_s is None else began + claim.timeout_s

    @staticmethod
    def _timed_out(claim: Claim, deadline: float | None) -> Outcome | None:
        """The attempt's `timeout` outcome once `deadline` has passed; None before it, or
        without one. The kind then ends the body its own way (a child is killed, a thread
        is abandoned)."""
        if deadline is None or time.monotonic() < deadline:
            return None
        return Outcome("timeout", error=f"exceeded its timeout_s of {claim.timeout_s:g}s")

    @staticmethod
    def _until(deadline: float | None) -> float | None:
        """How long a slot may wait for its body before it looks at `deadline` again (None:
        until the body or an end request wakes it)."""
        if deadline is None:
            return None
        return min(DEADLINE_WAIT_CHUNK_S, max(0.0, deadline - time.monotonic()))

    def _finished(self) -> None:
        """The job is over (settled next): the slot is free."""
        with self._lock:
            self._claim = None
            self._abort = None

    def _end(self, sink: JobSink, claim: Claim, outcome: Outcome) -> None:
        """Free the slot and settle `claim`, in the order that sends the next claim soonest.

        A success is only queued for its ack, which takes no time here: queued first, it rides
        on the claim that freeing the slot sets off (work/acks.py). Any other settle is a
        request of its own: the slot is freed first, so that the next claim travels while the
        settle does. Either way the slot's next job waits in its inbox until this returns.
        """
        sink.job_ended(claim, outcome, time.monotonic() - self._began)
        if outcome.kind == "ok":
            sink.settle(claim, outcome)
        self._finished()
        sink.slot_free(cast(Slot, self))  # every kind of slot is one (SlotBase leaves its hooks)
        if outcome.kind != "ok":
            sink.settle(claim, outcome)

    @abc.abstractmethod
    def _serve(self) -> None:
        """The slot's thread: take claims from the inbox until None, run and settle each."""

    @abc.abstractmethod
    def _aborted(self) -> None:
        """An end was asked for the running job (called under the lock): wake what waits."""


def format_failure(exc: BaseException) -> str:
    """The traceback from the job's own code down: Lakeshore's frames above it are noise.

    A failure with no user frame at all (a shell command's non-zero exit) is just its message.
    """
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_globals.get("__name__", "").startswith(_OWN_PACKAGE):
        tb = tb.tb_next
    try:
        return "".join(traceback.format_exception(type(exc), exc, tb)).rstrip()
    except Exception:  # an exception whose __str__ raises still ends its job with a name
        return f"{type(exc).__name__} (its message could not be rendered)"


_OWN_PACKAGE = __name__.rsplit(".", 2)[0]  # dreamlake.lakeshore


def summarise_failure(exc: BaseException) -> str:
    """`ValueError: first line of the message`: one log field, not the whole traceback."""
    try:
        message = str(exc).strip().splitlines()
    except Exception:
        return type(exc).__name__
    return f"{type(exc).__name__}: {message[0]}" if message else type(exc).__name__


def abort_error(reason: AbortReason) -> str:
    return {
        "killed": "killed on request (cancel with kill=True)",
        "release": "released unfinished: the worker stopped before the job did",
        "lost": "the lease was lost (the job was re-dispatched or ended elsewhere)",
        "gpu_memory": "ended for using more GPU memory than its share (--enforce-gpu-memory)",
        "gpu_failed": "released: a GPU it ran on failed",
        "hung": "hung: it made no progress for its hang_timeout_s",
    }[reason]


#: The cause a slot records before it ends an attempt on request (a lost lease: none, the row
#: is no longer the slot's to write).
ABORT_CAUSES: dict[AbortReason, str] = {
    "killed": "cancel",
    "release": "notice",
    "gpu_memory": "gpu_memory",
    "gpu_failed": "gpu_failed",
}


def abort_outcome(reason: AbortReason, detail: str = "") -> Outcome:
    """The outcome of an attempt ended on request. A job still running when its worker stops
    (a preemption notice's grace ran out, a second signal) is preempted (issue 35): it goes
    back to the queue at once, not charged to its attempts; so is one whose GPU failed (the
    box's fault, not the job's). One over its GPU memory share fails (`gpu_memory`)."""
    error = detail or abort_error(reason)
    if reason == "release":
        return Outcome("preempted", error=error, cause="notice")
    if reason == "gpu_failed":
        return Outcome("preempted", error=error, cause="gpu_failed")
    if reason == "gpu_memory":
        return Outcome("died", error=error, cause="gpu_memory")
    if reason == "hung":  # a gang's hang (issue 47): its attempt fails, retried as a whole
        return Outcome("error", error=error, summary=error[:200])
    return Outcome(reason, error=error)


#: What a job's out-of-host-memory end says first, whichever way it was found: the kernel's OOM
#: killer (daemon/oom.py) or a MemoryError the body raised (an RLIMIT_AS, a failed allocation).
OOM_ERROR = "ran out of host memory"


def error_outcome(exc: BaseException) -> Outcome:
    """The outcome of a body that raised `exc`. A MemoryError is the job out of host memory:
    recorded as `oom`, its error says so before the traceback."""
    text, summary = format_failure(exc), summarise_failure(exc)
    if isinstance(exc, MemoryError):
        return Outcome(
            "error", error=f"{OOM_ERROR} (MemoryError):\n{text}", summary=summary, cause="oom"
        )
    return Outcome("error", error=text, summary=summary, cause="error")


def crash_outcome(exc: BaseException) -> Outcome:
    """Anything that goes wrong around a job (not in it) ends that attempt, never the worker."""
    return Outcome(
        "error",
        error=f"the worker could not run this job: {summarise_failure(exc)}",
        summary=summarise_failure(exc),
    )
