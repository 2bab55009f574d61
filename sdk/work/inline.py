"""Inline slots: `run_worker` runs each body on a thread of the calling process.

What a thread cannot do is be killed. A kill, a timeout, a lost lease or a stop-at-once still
ends the *attempt* at once (the core settles it and the slot takes the next job), and the body is
told as far as Python allows: its next `yield` (or `dls.run.post`) raises `JobAbandoned`, and
anything it returns afterwards is dropped. A body that never yields runs on, unheeded, in its
daemon thread; jobs that must be stoppable belong in `lakeshore-daemon`, whose slots are
processes.

Bodies run one after another on a runner thread that outlives them, as in a thread pool:
starting a thread per job cost more than a no-op job's whole run. Each body gets a fresh
`contextvars` context, as a new thread would. An abandoned body keeps its runner, and the slot
starts another for its next job.
"""

from __future__ import annotations

import contextvars
import queue
import threading
import time
from typing import Any

from dreamlake.lakeshore import codec, spill
from dreamlake.lakeshore.attempt import AttemptLink, Preempted
from dreamlake.lakeshore.execute import Handler, run_body
from dreamlake.lakeshore.types import Claim

from .slot import (
    JobSink,
    Outcome,
    SlotBase,
    abort_outcome,
    crash_outcome,
    error_outcome,
)


class JobAbandoned(Exception):
    """Raised into a body that yields after its attempt was ended (killed, timed out, lost)."""


class InlineSlot(SlotBase):
    """One unit of concurrency in this process: a slot thread, and a runner thread for bodies."""

    thread_name = "lakeshore-inline"

    def __init__(
        self,
        index: int,
        sink: JobSink,
        *,
        handler: Handler | None = None,
        storage: Any = None,
        plane: Any = None,
    ) -> None:
        super().__init__(index)
        self._sink = sink
        self._handler = handler
        self._storage = storage
        self._plane = plane  # the worker's: objects go through it (objects/plane.py)
        self._changed = threading.Condition(self._lock)  # the body ended, or an end was asked
        self._runner: _Runner | None = None
        self._body: _Body | None = None  # the running attempt's (under the lock)

    def snapshot(self) -> dict[str, Any]:
        return self._snapshot("idle", [], None)

    def _aborted(self) -> None:
        self._changed.notify_all()

    def _tell(self, deadline: float | None) -> None:
        with self._lock:
            body = self._body
        if body is not None:
            body.link.notice(deadline)

    # -- the slot thread ---------------------------------------------------------------------

    def _serve(self) -> None:
        self.started.set()
        try:
            while (claim := self._inbox.get()) is not None:
                self._began = time.monotonic()
                try:
                    outcome = self._run(claim)
                except Exception as exc:  # around the body, not in it: end the attempt only
                    outcome = crash_outcome(exc)
                self._end(self._sink, claim, outcome)
        finally:
            self._drop_runner()

    def _drop_runner(self) -> None:
        """Let the runner end once its body returns (at once if it has none)."""
        if self._runner is not None:
            self._runner.close()
            self._runner = None

    def _run(self, claim: Claim) -> Outcome:
        body = _Body(claim, self._sink, self._handler, self._storage, self._changed, self._plane)
        if self._runner is None:
            self._runner = _Runner(f"lakeshore-job-{self.index}")
        with self._lock:
            self._body = body
            noticed = self._noticed
        if noticed is not None:  # a notice before this job started: it is told at once
            body.link.notice(noticed[0])
        self._runner.run(body)
        try:
            outcome = self._wait(claim, body)
        finally:
            with self._lock:
                self._body = None
        if body.outcome is None:  # abandoned: it keeps the runner, the next job gets another
            self._drop_runner()
        return outcome

    def _wait(self, claim: Claim, body: _Body) -> Outcome:
        deadline = self._run_deadline(claim, time.monotonic())
        with self._changed:
            while body.outcome is None and self._abort is None:
                if (timed_out := self._timed_out(claim, deadline)) is not None:
                    body.abandon()
                    return timed_out
                self._changed.wait(self._until(deadline))
            if body.outcome is not None:
                return body.outcome
            assert self._abort is not None
            _, reason, _ = self._abort
        body.abandon()
        return abort_outcome(reason)


class _Runner:
    """A thread that runs the bodies it is given one after another, until closed."""

    def __init__(self, name: str) -> None:
        self._bodies: queue.SimpleQueue[_Body | None] = queue.SimpleQueue()
        threading.Thread(target=self._loop, name=name, daemon=True).start()

    def run(self, body: _Body) -> None:
        self._bodies.put(body)

    def close(self) -> None:
        self._bodies.put(None)

    def _loop(self) -> None:
        while (body := self._bodies.get()) is not None:
            contextvars.Context().run(body.run)  # nothing a body set leaks into the next


class _Body:
    """One attempt's body on its own thread; its outcome is read under the slot's condition."""

    def __init__(
        self,
        claim: Claim,
        sink: JobSink,
        handler: Handler | None,
        storage: Any,
        changed: threading.Condition,
        plane: Any = None,
    ) -> None:
        self.claim = claim
        self._plane = plane
        self.outcome: Outcome | None = None
        self._sink = sink
        self._handler = handler
        self._storage = storage
        self._changed = changed
        self._abandoned = False
        self._refused: Outcome | None = None
        self.link = AttemptLink(self._save, claim.checkpoint)

    def _save(self, data: bytes) -> bytes | None:
        if self._abandoned:
            raise JobAbandoned(f"invocation {self.claim.id} was ended while it ran")
        return self._sink.checkpoint(self.claim, data)

    def abandon(self) -> None:
        self._abandoned = True

    def emit(self, value: Any) -> None:
        if self._abandoned:
            raise JobAbandoned(f"invocation {self.claim.id} was ended while it ran")
        refused = self._sink.post_frames(self.claim, [spill.dumps(value, storage=self._storage)])
        if refused is not None:
            self._refused = refused
            raise JobAbandoned(refused.error)

    def run(self) -> None:
        from dreamlake.lakeshore.objects.plane import (
            using,  # the body's objects go through the worker's plane
        )

        with using(self._plane):
            self._run()

    def _run(self) -> None:
        claim = self.claim
        try:
            self._sink.post_resume(claim)
            result = run_body(
                codec.decode(claim.payload),
                self.emit,
                self._handler,
                inv_id=claim.id,
                attempt=claim.attempt,
                storage=self._storage,
                queue=claim.queue,
                link=self.link,
                inputs=claim.inputs,
            )
            outcome = Outcome("ok", result=spill.dumps(result, storage=self._storage))
        except Preempted as exc:
            outcome = self._refused or Outcome("preempted", error=str(exc), cause=exc.cause)
        except BaseException as exc:  # SystemExit from a job is a failed job, not our exit
            outcome = self._refused or error_outcome(exc)
        with self._changed:
            self.outcome = outcome
            self._changed.notify_all()
