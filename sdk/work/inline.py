"""Inline slots: `run_worker` runs each body on a thread of the calling process.

What a thread cannot do is be killed. A kill, a timeout, a lost lease or a stop-at-once still
ends the *attempt* at once (the core settles it and the slot takes the next job), and the body is
told as far as Python allows: its next `yield` (or `dls.run.post`) raises `JobAbandoned`, and
anything it returns afterwards is dropped. A body that never yields runs on, unheeded, in its
daemon thread; jobs that must be stoppable belong in `lakeshore-daemon`, whose slots are
processes.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import codec, spill
from ..execute import Handler, run_body
from ..types import Claim
from .slot import (
    DEADLINE_WAIT_CHUNK_S,
    AbortReason,
    JobSink,
    Outcome,
    abort_error,
    crash_outcome,
    format_failure,
    summarise_failure,
)


class JobAbandoned(Exception):
    """Raised into a body that yields after its attempt was ended (killed, timed out, lost)."""


class InlineSlot:
    """One unit of concurrency in this process: a slot thread, and a fresh thread per body."""

    def __init__(
        self,
        index: int,
        sink: JobSink,
        *,
        handler: Handler | None = None,
        storage: Any = None,
    ) -> None:
        self.index = index
        self.started = threading.Event()
        self.start_error: BaseException | None = None
        self._sink = sink
        self._handler = handler
        self._storage = storage
        self._inbox: queue.SimpleQueue[Claim | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # the body ended, or an abort came
        self._claim: Claim | None = None
        self._since = 0.0
        self._abort: AbortReason | None = None
        self._thread: threading.Thread | None = None

    # -- what other threads may call ---------------------------------------------------------

    def start(self, run_thread: Callable[[str, Callable[[], None]], threading.Thread]) -> None:
        self._thread = run_thread(f"lakeshore-inline-{self.index}", self._serve)

    def assign(self, claim: Claim) -> None:
        with self._lock:
            if self._claim is not None:
                raise RuntimeError(f"slot {self.index} is busy")
            self._claim, self._since, self._abort = claim, time.time(), None
        self._inbox.put(claim)

    def abort(self, inv_id: str, reason: AbortReason, grace_s: float | None = None) -> bool:
        with self._lock:
            if self._claim is None or self._claim.id != inv_id or self._abort is not None:
                return False
            self._abort = reason
            self._changed.notify_all()
        return True

    def close(self) -> None:
        self._inbox.put(None)

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

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            claim, since = self._claim, self._since
        return {
            "index": self.index,
            "state": "busy" if claim else "idle",
            "invocation": claim.id if claim else None,
            "queue": claim.queue if claim else None,
            "attempt": claim.attempt if claim else None,
            "since": since if claim else None,
            "gpus": [],
            "pid": None,
        }

    # -- the slot thread ---------------------------------------------------------------------

    def _serve(self) -> None:
        self.started.set()
        while (claim := self._inbox.get()) is not None:
            try:
                outcome = self._run(claim)
            except Exception as exc:  # around the body, not in it: end the attempt, not the slot
                outcome = crash_outcome(exc)
            with self._lock:
                self._claim = None
                self._abort = None
            self._sink.slot_free(self)
            self._sink.settle(claim, outcome)

    def _run(self, claim: Claim) -> Outcome:
        body = _Body(claim, self._sink, self._handler, self._storage, self._changed)
        threading.Thread(target=body.run, name=f"lakeshore-job-{claim.id}", daemon=True).start()
        deadline = None if claim.timeout_s is None else time.monotonic() + claim.timeout_s
        with self._changed:
            while body.outcome is None and self._abort is None:
                if deadline is not None and time.monotonic() >= deadline:
                    body.abandon()
                    return Outcome(
                        "timeout", error=f"exceeded its timeout_s of {claim.timeout_s:g}s"
                    )
                left = None if deadline is None else deadline - time.monotonic()
                self._changed.wait(None if left is None else min(left, DEADLINE_WAIT_CHUNK_S))
            if body.outcome is not None:
                return body.outcome
            reason = self._abort
        assert reason is not None
        body.abandon()
        return Outcome(reason, error=abort_error(reason))


class _Body:
    """One attempt's body on its own thread; its outcome is read under the slot's condition."""

    def __init__(
        self,
        claim: Claim,
        sink: JobSink,
        handler: Handler | None,
        storage: Any,
        changed: threading.Condition,
    ) -> None:
        self.claim = claim
        self.outcome: Outcome | None = None
        self._sink = sink
        self._handler = handler
        self._storage = storage
        self._changed = changed
        self._abandoned = False
        self._refused: Outcome | None = None

    def abandon(self) -> None:
        self._abandoned = True

    def emit(self, value: Any) -> None:
        if self._abandoned:
            raise JobAbandoned(f"invocation {self.claim.id} was ended while it ran")
        refused = self._sink.post_frames(self.claim, [codec.encode(value)])
        if refused is not None:
            self._refused = refused
            raise JobAbandoned(refused.error)

    def run(self) -> None:
        claim = self.claim
        try:
            result = run_body(
                codec.decode(claim.payload),
                self.emit,
                self._handler,
                inv_id=claim.id,
                attempt=claim.attempt,
                storage=self._storage,
                queue=claim.queue,
            )
            outcome = Outcome("ok", result=spill.dumps(result, storage=self._storage))
        except BaseException as exc:  # SystemExit from a job is a failed job, not our exit
            outcome = self._refused or Outcome(
                "error", error=format_failure(exc), summary=summarise_failure(exc)
            )
        with self._changed:
            self.outcome = outcome
            self._changed.notify_all()
