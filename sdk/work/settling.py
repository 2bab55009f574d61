"""Where frames and settles reach the plane: the worker core's `JobSink` half.

Mixed into `WorkerCore` (core.py). Successes go to the ack queue and are sent in batches
(acks.py), or ride on the next claim; every other settle is retried while the plane is
unreachable and logged, never raised, when it is refused.
"""

from __future__ import annotations

import secrets
import threading
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from dreamlake.lakeshore.errors import DispatchError, LeaseLost
from dreamlake.lakeshore.plane.base import Plane
from dreamlake.lakeshore.types import END_STATE_CAUSES, Ack, Claim

from .acks import AckQueue
from .retry import GaveUp, Retrier
from .slot import Outcome


class Settling:
    """Frames and settles (mixed into `WorkerCore`)."""

    plane: Plane
    _log: Any
    _retry: Retrier
    _urgent: threading.Event
    _acks: AckQueue
    _buffer: deque[Claim]

    def post_frames(self, claim: Claim, frames: Sequence[bytes]) -> Outcome | None:
        for value in frames:
            # One id per frame, kept across retries: a post whose answer was lost is sent again
            # and finds the frame it made (never a second copy in the journal).
            post = partial(
                self.plane.post, claim.id, "VALUE", value, lease=claim.lease, post_id=new_post_id()
            )
            try:
                self._retry.call("post", post, give_up=self._urgent)
            except GaveUp:
                return Outcome("lost", error="the worker stopped while posting frames")
            except LeaseLost as exc:
                self._log.warning("job.post_refused", invocation=claim.id, error=str(exc))
                return Outcome("lost", error=str(exc))
            except DispatchError as exc:  # a frame too large, a journal closed by a kill
                self._log.warning("job.post_refused", invocation=claim.id, error=str(exc))
                return Outcome(
                    "error", error=f"a frame was refused by the plane: {exc}", summary=str(exc)
                )
        return None

    def settle(self, claim: Claim, outcome: Outcome) -> None:
        plane = self.plane
        log = self._log.bind(invocation=claim.id, queue=claim.queue, attempt=claim.attempt)
        if outcome.kind == "ok":
            self._acks.put(claim, outcome.result)  # logged once its batch commits
        elif claim.gang is not None and outcome.kind in ("error", "died"):
            self._settle_part_failed(claim, outcome, log)
        elif outcome.kind == "error" and outcome.cause in ("oom", "runtime"):
            # out of host memory, or a runtime that could not be made: said so, not retried
            self._end_failed(claim, outcome, log)
        elif outcome.kind == "error":
            if self._settle_call(
                claim,
                "nack",
                lambda: plane.nack(claim.id, claim.lease, error=outcome.error, retry=False),
            ):
                log.info("job.failed", error=outcome.summary)
        elif outcome.kind == "release":
            if self._settle_call(claim, "release", lambda: plane.release(claim.id, claim.lease)):
                log.info("job.released", reason=outcome.error)
        elif outcome.kind == "preempted":
            self._settle_preempted(claim, outcome, log)
        elif outcome.kind == "lost":
            log.warning("job.abandoned", reason=outcome.error)
        elif outcome.kind == "died":
            self._end_failed(claim, outcome, log)
        else:  # killed, timeout: the worker ended the attempt
            state = outcome.kind
            if self._settle_call(
                claim,
                "end",
                lambda: plane.end(claim.id, claim.lease, state=state, error=outcome.error),
            ):
                log.info(f"job.{outcome.kind}", error=outcome.error)

    def _settle_part_failed(self, claim: Claim, outcome: Outcome, log: Any) -> None:
        """A gang's part failed (issue 47): its error, or its process's death, fails the whole
        attempt, which runs again as a new gang from its last checkpoint while attempts remain
        (a distributed job's rank dies for reasons a retry outlives: a lost peer, a NCCL
        error), charged as any failure is."""
        rank = (claim.gang or {}).get("rank")
        error = f"rank {rank}: {outcome.error or outcome.kind}"
        if self._settle_call(
            claim, "nack", lambda: self.plane.nack(claim.id, claim.lease, error=error, retry=True)
        ):
            log.info("job.failed", rank=rank, error=outcome.summary or error)

    def _end_failed(self, claim: Claim, outcome: Outcome, log: Any) -> None:
        """End an attempt `failed` for its cause as the slot found it: its process died, ran
        out of host memory (`oom`), or used more than its GPU memory share (`gpu_memory`)."""
        cause = outcome.cause if outcome.cause in END_STATE_CAUSES["failed"] else "died"
        end = partial(
            self.plane.end,
            claim.id,
            claim.lease,
            state="failed",
            error=outcome.error,
            cause=None if cause == "died" else cause,  # a server before issue 35 knows none
        )
        if self._settle_call(claim, "end", end):
            log.info("job.died" if cause == "died" else f"job.{cause}", error=outcome.error)

    def _settle_preempted(self, claim: Claim, outcome: Outcome, log: Any) -> None:
        """Give a preempted attempt back (issue 35): requeued at once, not charged."""

        def release() -> bool:
            return self.plane.release(
                claim.id, claim.lease, outcome="preempted", cause=outcome.cause
            )

        if self._settle_call(claim, "release", release):
            log.info("job.preempted", cause=outcome.cause, reason=outcome.error)

    def _ack_loop(self) -> None:
        while (batch := self._acks.take(busy=lambda: bool(self._buffer))) is not None:
            try:
                self._send_acks(batch)
            finally:
                self._acks.done(batch)

    def _send_acks(self, batch: Sequence[tuple[Claim, Ack]]) -> None:
        acks = [ack for _, ack in batch]
        errors: Sequence[BaseException | None]
        try:
            errors = self._retry.call(
                "ack", lambda: self.plane.ack_many(acks), give_up=self._urgent
            )
        except GaveUp:
            errors = [GaveUp("ack")] * len(batch)
        except DispatchError as exc:
            errors = [exc] * len(batch)
        self._report_acks(batch, errors)

    def _report_acks(
        self, batch: Sequence[tuple[Claim, Ack]], errors: Sequence[BaseException | None]
    ) -> None:
        for (claim, _), error in zip(batch, errors, strict=True):
            log = self._log.bind(invocation=claim.id, queue=claim.queue, attempt=claim.attempt)
            if error is None:
                log.info("job.succeeded")
            elif isinstance(error, GaveUp):
                log.error("job.settle_abandoned", verb="ack")
            elif isinstance(error, LeaseLost):
                log.warning("job.settle_refused", verb="ack", error=str(error))
            else:
                log.error("job.settle_failed", verb="ack", error=str(error))

    def _settle_call(self, claim: Claim, verb: str, call: Callable[[], object]) -> bool:
        """Settle with retries while unreachable; a refusal is logged and dropped, never raised.

        A settle keeps trying through a drain (the job's outcome is worth waiting for) but not
        past a second signal. The logs name the attempt: one worker can hold two attempts of a
        job at once (its lease ran out on one slot and another slot claimed the requeued job),
        and which one was refused matters to whoever reads the log.
        """
        log = self._log.bind(invocation=claim.id, verb=verb, attempt=claim.attempt)
        try:
            self._retry.call(verb, call, give_up=self._urgent)
        except GaveUp:
            log.error("job.settle_abandoned")
            return False
        except LeaseLost as exc:
            log.warning("job.settle_refused", error=str(exc))
            return False
        except DispatchError as exc:
            log.error("job.settle_failed", error=str(exc))
            return False
        return True


def new_post_id() -> str:
    """A frame post's id (see `Plane.post`): random, so no two posts share one."""
    return secrets.token_hex(12)
