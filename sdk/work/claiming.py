"""The claim loop of the worker core: wait for room, claim a batch, hand it to free slots.

Mixed into `WorkerCore` (core.py), which owns the state declared here. Room is free slots
plus prefetch less what is in hand; a claim carries the acks waiting to ride on it (acks.py);
what is claimed ahead of a free slot waits in the prefetch buffer.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

from dreamlake.lakeshore import signing
from dreamlake.lakeshore.errors import DispatchError
from dreamlake.lakeshore.plane.base import Plane
from dreamlake.lakeshore.types import Ack, Claim, ClaimArgs

from .config import Claimer, WorkerConfig
from .notice import Preemptible
from .observer import Observers
from .retry import is_transient
from .settling import Settling
from .slot import Slot

#: How long a claim that settles first waits for an ack batch already on its way (a commit).
SETTLE_FIRST_WAIT_S = 5.0


class Claiming(Settling, Preemptible):
    """The claim loop and the prefetch buffer (mixed into `WorkerCore`)."""

    plane: Plane
    config: WorkerConfig
    slots: list[Slot]
    started_jobs: int
    host: str | None
    fatal: BaseException | None
    _claimer: Claimer | None
    _named: bool
    _draining: threading.Event
    _free: threading.Condition
    _buffer: deque[Claim]
    observers: Observers

    def _queues(self) -> list[str]:  # WorkerCore's: the worker row's membership
        raise NotImplementedError

    def _offer(self) -> dict[str, Any] | None:
        """What this worker has free, sent with each claim so that only jobs that fit come
        back (`resources.check_free`); None: any job (a worker that places nothing)."""
        return None

    def _placed(self, claim: Claim) -> bool:
        """Take the resources a claimed job asked for; False: it went back to the queue."""
        return True

    def _settles_first(self) -> bool:
        """Whether a claim carries every success not yet committed (`AckQueue.take_all`): a
        worker whose offer counts GPUs a finished job just gave back, so that the plane never
        records the next job's start on them before that job's end."""
        return False

    def _claim_loop(self) -> None:
        backoff = self._retry.backoff()
        while True:
            room = self._room()
            if room is None:
                self._acks.unride()
                return
            queues = self._queues()
            if not queues and self._named:
                self._acks.unride()
                if self.config.burst:
                    self.drain("burst: no queue left to serve")
                    return
                self._draining.wait(self.config.claim_wait_s)  # idle until a queue is added
                continue
            with self._free:
                buffered = bool(self._buffer)
            riders = (
                self._acks.take_all(SETTLE_FIRST_WAIT_S)
                if self._claimer is None and self._settles_first()
                else self._acks.take_riders()
            )
            try:
                claims = self._claim(queues, room, self._claim_wait(buffered), riders)
            except Exception as exc:
                self._acks.unride(riders)  # the acks thread sends them on its own
                self._claim_failed(exc, queues)
                self._draining.wait(self._retry.pause("claim", backoff))
                continue
            finally:
                self._acks.done(riders)
            self._retry.reachable("claim")
            self.observers.claimed(claims)
            backoff.reset()
            if not claims:
                if buffered:
                    self._wait_for_a_start()
                elif self.config.burst and not self._wait_for_work():
                    self.drain("burst: the queues are empty")
                    return
                continue
            if not self._take(claims):
                return

    def _claim_failed(self, exc: Exception, queues: Sequence[str]) -> None:
        """A claim that failed: retried after a pause if the plane is away or refused it (a
        refusal is logged), else raised (the worker stops: a bug, or `raise_refusals`)."""
        if is_transient(exc):
            self._retry.unreachable("claim", exc)
            self._retry.check("claim", exc)  # a burst run's bound
            return
        if not isinstance(exc, DispatchError):
            raise exc
        self.observers.plane_error("claim", "refused")
        if self.config.raise_refusals:
            raise exc
        self._log.warning("claim.refused", error=str(exc), queues=list(queues))

    def _claim_wait(self, buffered: bool) -> float:
        """How long this claim may wait for a job: not at all with a job in hand (it must not
        wait on the long-poll), `burst_wait_s` in burst mode, else the idle long-poll."""
        if buffered:
            return 0.0
        return self.config.burst_wait_s if self.config.burst else self.config.claim_wait_s

    def _claim(
        self,
        queues: Sequence[str],
        room: int,
        wait_s: float,
        riders: Sequence[tuple[Claim, Ack]] = (),
    ) -> list[Claim]:
        if self._claimer is not None:
            return self._claimer(queues, room, wait_s)
        args = ClaimArgs(
            queues,
            self.config.name,
            lease_s=self.config.lease_s,
            limit=room,
            kind=self.config.kind,
            host=self.host,
            free=self._offer(),
        )
        if not riders:
            return self.plane.claim_many(args, wait_s=wait_s)
        acks = [ack for _, ack in riders]
        errors, claims = self.plane.ack_and_claim(acks, args, wait_s=wait_s)
        self._report_acks(riders, errors)
        return claims

    def _take(self, claims: Sequence[Claim]) -> bool:
        """Buffer what was claimed and start what fits; False (all released) once draining.
        A claim that lands after claiming paused (a rebalance) goes back unrun too."""
        if self._draining.is_set() or self.claiming_paused:
            for claim in claims:
                self._release_unstarted(claim)
            return not self._draining.is_set()
        for claim in claims:
            if self._refused(claim) or not self._placed(claim):
                continue
            self._log.info(
                "job.claimed", invocation=claim.id, queue=claim.queue, attempt=claim.attempt
            )
            with self._free:
                self._buffer.append(claim)
        self._start_buffered()
        return True

    def _room(self) -> int | None:
        """How many jobs to claim now (free slots + prefetch - in hand), waiting for room.

        With jobs in hand, wait until half the prefetch is gone: refilling one job at a time
        would cost a request per job, which is what prefetching is there to save.
        """
        refill = max(1, (self.config.prefetch + 1) // 2)
        with self._free:
            while not self._draining.is_set() and self.fatal is None:
                if self.claiming_paused:  # a rebalance recommendation: jobs in hand run on
                    self._acks.unride()
                    self._free.wait(self.config.claim_wait_s)
                    continue
                left = self._jobs_left()
                if left == 0:
                    self._acks.unride()  # no claim is coming to carry them
                    self._wait_for_work()
                    self.drain(f"ran {self.config.max_jobs} job(s) as asked")
                    return None
                free = sum(1 for s in self.slots if not s.busy)
                room = min(free + self.config.prefetch - len(self._buffer), left)
                if room > 0 and (not self._buffer or room >= refill):
                    self._acks.riding(False)
                    return room
                # The slot that frees room wakes this loop next, which claims at once (nothing
                # in hand): that slot's ack rides on the claim instead of a request of its own.
                self._acks.riding(self._claimer is None and not self._buffer)
                self._free.wait()
        return None

    def _jobs_left(self) -> int:
        """How many more jobs may be claimed (`max_jobs` less those claimed); large if unbounded."""
        if self.config.max_jobs is None:
            return 1 << 30
        return max(0, self.config.max_jobs - self.started_jobs - len(self._buffer))

    def _wait_for_a_start(self) -> None:
        """Nothing more to claim, but jobs in hand: sleep until a slot takes one of them."""
        with self._free:
            held = len(self._buffer)
            while (
                len(self._buffer) >= held
                and self._buffer
                and not self._draining.is_set()
                and self.fatal is None
            ):
                self._free.wait()

    def _start_buffered(self) -> None:
        """Hand buffered claims to free slots, oldest first (never while draining)."""
        with self._free:
            while self._buffer and not self._draining.is_set():
                idle = [s for s in self.slots if not s.busy]
                if not idle:
                    break
                claim = self._buffer.popleft()
                slot = self._slot_for(claim, idle)
                self._log.debug("job.started", invocation=claim.id, slot=slot.index)
                self.started_jobs += 1
                slot.assign(claim)
            self._free.notify_all()

    def _slot_for(self, claim: Claim, idle: Sequence[Slot]) -> Slot:
        """Which idle slot runs `claim` (the daemon picks one whose child sees its GPUs)."""
        return idle[0]

    def _refused(self, claim: Claim) -> bool:
        """Never run a payload from a namespace this worker does not serve, or one the control
        plane did not sign: unpickling it could run anybody's code."""
        namespace = getattr(self.plane, "namespace", claim.namespace)
        if claim.namespace != namespace:
            # Not ours to settle either: its lease runs out and its own workers take it.
            self._log.error(
                "job.refused", invocation=claim.id, reason=f"namespace {claim.namespace!r}"
            )
            return True
        key = self.config.signing_key
        if key is None:
            return False
        try:
            signing.verify(
                key, claim.namespace, claim.queue, claim.id, claim.payload, claim.signature
            )
        except signing.BadSignature as exc:
            reason = str(exc)
            self._log.error("job.refused", invocation=claim.id, reason=reason)
            self._settle_call(
                claim,
                "end",
                lambda: self.plane.end(claim.id, claim.lease, state="failed", error=reason),
            )
            return True
        return False

    def _wait_for_work(self) -> bool:
        """Nothing more to claim: wait for running jobs; True if any ran (look again)."""
        with self._free:
            if not self._in_hand():
                return False
            while self._in_hand() and not self._draining.is_set():
                self._free.wait()
        return not self._draining.is_set()

    def _in_hand(self) -> bool:
        return bool(self._buffer) or any(s.busy for s in self.slots)

    def _release_unstarted(self, claim: Claim) -> None:
        """A claim that landed as the drain began goes straight back, attempt unspent."""
        self._settle_call(claim, "release", lambda: self.plane.release(claim.id, claim.lease))
        self._log.info("job.released", invocation=claim.id, reason="claimed while draining")
