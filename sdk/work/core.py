"""The worker core: register, claim into free slots, renew, settle, drain, leave.

One implementation for both workers: `lakeshore-daemon` drives it with process slots (a warm
child per slot, daemon/slots.py) and adds GPUs, systemd and signals; `run_worker` drives it with
inline slots (a thread per job, inline.py). What differs is only how a body runs.

Threads, not asyncio: every plane call blocks (SQLite, or HTTP long-polls), so a thread per
concern reads top to bottom with no executor hops. The shape follows procrastinate's worker:

    caller's thread waits for a reason to stop (drain, burst done, a crash)
    claim           while not draining: wait for room (free slots + prefetch), claim a batch,
                    hand claims to free slots and keep the rest in the prefetch buffer
    acks            sends the slots' successes in batches, one commit each (acks.py)
    leases          renew leases (and learn kill requests), a third of the lease apart (leases.py)
    heartbeat       report load, re-read the worker row
    watchdog        WATCHDOG=1 to systemd while the lease loop is making progress
    slot-N          one per slot: runs a job, posts frames, settles (slot.py)

Every side thread is watched: if one raises, the worker stops (releasing what it holds) rather
than stay half alive with, say, no heartbeat while it keeps claiming. The stop path is one
function whichever reason started it, and it always ends with the worker row marked `gone`.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, TypeVar

from dreamlake.lakeshore.work.leases import KILL_POLL_S, keep_leases

from .. import protocols, signing
from ..errors import DispatchError, LeaseLost, NotFound
from ..plane.base import Plane
from ..types import END_STATE_CAUSES, Ack, Claim, WorkerInfo
from . import checkpoints
from .acks import AckQueue
from .log import EventLogger
from .notice import Preemptible
from .retry import GaveUp, PlaneUnreachable, Retrier, is_transient
from .slot import JobSink, Outcome, Slot, SlotFactory

T = TypeVar("T")

#: An idle claim waits this long on the plane's wake-up before the loop looks around again
#: (membership, drain): the bound on how late an idle worker notices either.
CLAIM_WAIT_S = 1.0
#: The worker row (membership and state) is re-read at least this often while claiming.
MEMBERSHIP_POLL_S = 1.0
#: The worker row's heartbeat, at most this far apart (the plane calls a worker stale at 120 s).
HEARTBEAT_MAX_S = 10.0
#: While draining, systemd is asked for this much more than the time left, at least this often.
EXTEND_SLACK_S = 30.0
EXTEND_EVERY_S = 5.0
#: Grace before SIGKILL when stopping at once (second signal, crashed side task).
STOP_NOW_GRACE_S = 1.0
#: Attempts at marking the row gone on the way out; a row left alive just goes stale.
GONE_ATTEMPTS = 5
#: On the way out, how long the last acks may take to reach the plane.
ACK_FLUSH_S = 30.0

EXIT_OK = 0
EXIT_CRASHED = 1
EXIT_CONFIG = 2
#: A burst run gave up on a plane it could not reach (`give_up_unreachable_s`).
EXIT_UNREACHABLE = 3
#: How long a burst run waits for a plane it cannot reach before it gives up.
BURST_GIVE_UP_S = 30.0

#: Claims `limit` jobs from `queues`, waiting up to `wait_s` for the first (plane.claim_many
#: by default; a queue handle claims with its own kind, temperature and anneal schedule).
Claimer = Callable[[Sequence[str], int, float], list[Claim]]


class ConfigError(Exception):
    """The worker cannot start as asked (GPU plan, handler); the daemon exits 2 with it."""


class Notifier(Protocol):
    """Where the core reports its lifecycle: systemd's notify socket for the daemon."""

    @property
    def watchdog_interval_s(self) -> float | None: ...

    def ready(self, status: str) -> bool: ...
    def status(self, status: str) -> bool: ...
    def watchdog(self) -> bool: ...
    def stopping(self, status: str) -> bool: ...
    def extend_timeout(self, seconds: float) -> bool: ...


class SilentNotifier:
    """No supervisor to tell: `run_worker` in somebody's program."""

    watchdog_interval_s: float | None = None

    def ready(self, status: str) -> bool:
        return False

    status = stopping = ready

    def watchdog(self) -> bool:
        return False

    def extend_timeout(self, seconds: float) -> bool:
        return False


@dataclass(frozen=True)
class WorkerConfig:
    name: str
    #: The queues served; `()` is the default queue (as the plane stores it), None every queue
    #: of the namespace (`run_worker(plane)`), re-listed at the membership poll.
    queues: tuple[str, ...] | None = ()
    concurrency: int = 1
    #: Jobs claimed ahead of a free slot, so a stream of short jobs costs one claim per batch.
    #: 0 (the default) claims only for free slots: a long job never holds another one hostage.
    prefetch: int = 0
    burst: bool = False
    #: In burst mode, how long a claim waits for a job before the queues count as empty.
    burst_wait_s: float = 0.0
    #: Stop claiming after this many jobs (`run_worker(once=True)` is 1), then drain.
    max_jobs: int | None = None
    lease_s: float = 60.0
    #: The order jobs are claimed in; None: each queue's own kind.
    kind: str | None = None
    drain_timeout_s: float = 60.0
    kill_grace_s: float = 10.0
    claim_wait_s: float = CLAIM_WAIT_S
    storage: str | None = None
    #: The control plane's payload-signing key: with it, a claim whose signature does not
    #: verify is refused before its payload is decoded (sdk/signing.py).
    signing_key: bytes | None = None
    #: A refused claim (an unknown queue, a token without rights) raises out of `run()` instead
    #: of being logged and retried: right for a library call, wrong for a fleet's daemon.
    raise_refusals: bool = False
    #: After a preemption notice, how long running jobs get to checkpoint and stop before they
    #: are killed and released as preempted (never past the notice's own deadline).
    preempt_grace_s: float = 30.0
    #: Stop (EXIT_UNREACHABLE) once registering or claiming has found the plane unreachable for
    #: this long; None rides out any outage. Burst runs set it: somebody waits for them to end.
    give_up_unreachable_s: float | None = None


class WorkerCore(Preemptible, JobSink):
    """`WorkerCore(plane, config, slots).run()` returns the exit code; `fatal` says why it crashed.

    The constructor only stores its arguments; `run()` does everything, and `drain()` /
    `stop_now()` may be called from any thread (signal handlers, tests, an embedding program).
    """

    def __init__(
        self,
        plane: Plane,
        config: WorkerConfig,
        slots: SlotFactory | None = None,
        *,
        notifier: Notifier | None = None,
        log: Any = None,
        claimer: Claimer | None = None,
    ) -> None:
        self.plane = plane
        self.config = config
        self.notifier: Notifier = notifier or SilentNotifier()
        self.worker_id: str | None = None
        #: This box's host id, read when `run()` registers the row (None until then).
        self.host: str | None = None
        self.slots: list[Slot] = []
        self.started_jobs = 0
        self.fatal: BaseException | None = None
        self._slot_factory = slots
        self._claimer = claimer
        self._log = log if log is not None else EventLogger({"worker": config.name})
        self._membership = list(config.queues or ())
        #: Started for named queues: if they are all taken away, it idles (the empty list is
        #: how the plane spells "the default queue", which this worker was never asked to serve).
        self._named = bool(config.queues)
        self._row_read_at = 0.0
        self._row_lock = threading.Lock()
        self._draining = threading.Event()
        self._urgent = threading.Event()  # stop at once: second signal or a crashed task
        self._halt = threading.Event()  # side threads exit
        self._wake = threading.Event()  # the main thread has something to look at
        self._free = threading.Condition()  # a slot became free, or the worker is stopping
        self._stop_reason = ""
        self._lease_tick_at = time.monotonic()
        self._threads: list[threading.Thread] = []
        self._retry = Retrier(self._log, give_up_s=config.give_up_unreachable_s)
        self._buffer: deque[Claim] = deque()  # claimed ahead of a free slot (under self._free)
        self._acks = AckQueue()
        self._init_notice()

    # -- the public controls ------------------------------------------------------------------

    def drain(self, reason: str = "requested") -> None:
        """Stop claiming, let running jobs finish (up to drain_timeout_s), then exit."""
        if not self._draining.is_set():
            self._stop_reason = reason
            self._draining.set()
        self._wake.set()
        with self._free:
            self._free.notify_all()

    def stop_now(self, reason: str = "requested") -> None:
        """Stop at once: end running jobs and give their claims back to the queue."""
        self._urgent.set()
        self.drain(reason)

    @property
    def draining(self) -> bool:
        return self._draining.is_set()

    # -- what a kind of worker adds -----------------------------------------------------------

    def _prepare(self) -> SlotFactory:
        """Check the plan and say how slots are built (the daemon reads its GPUs here)."""
        if self._slot_factory is None:
            raise ConfigError("a worker needs a slot factory")
        return self._slot_factory

    def _worker_info(self) -> dict[str, Any]:
        """What the worker row records about this worker (the daemon adds host facts)."""
        return {"concurrency": self.config.concurrency}

    def _load(self) -> dict[str, Any]:
        """The heartbeat's load figures (the daemon measures CPU, memory and GPUs)."""
        return {"slots": [s.snapshot() for s in self.slots]}

    def _ready_fields(self) -> dict[str, Any]:
        """What the `daemon.ready` line says besides the worker, its queues and concurrency."""
        return {}

    def _offer(self) -> dict[str, Any] | None:
        """What this worker has free, sent with each claim so that only jobs that fit come
        back (`resources.check_free`); None: any job (a worker that places nothing)."""
        return None

    def _placed(self, claim: Claim) -> bool:
        """Take the resources a claimed job asked for; False: it went back to the queue."""
        return True

    def _on_ready(self) -> None:
        self._log.info(
            "daemon.ready",
            worker_id=self.worker_id,
            queues=self._membership or ["default"],
            concurrency=self.config.concurrency,
            **self._ready_fields(),
        )

    # -- run ----------------------------------------------------------------------------------

    def run(self) -> int:
        """Serve until drained or stopped (or a side thread crashed); the exit code."""
        factory = self._prepare()
        try:
            worker = self._register()
        except PlaneUnreachable as exc:
            self.fatal = exc
            self._log.error("daemon.plane_unreachable", error=str(exc))
            return EXIT_UNREACHABLE
        if worker is None:
            return EXIT_OK  # asked to stop before the plane could be reached
        self.worker_id = worker.id
        self._apply_row(worker)
        started = self._start_slots(factory)
        if started:
            self.notifier.ready(self._status_line())
            self._on_ready()
            self._spawn_thread("lakeshore-leases", self._lease_loop)
            self._spawn_thread("lakeshore-heartbeat", self._heartbeat_loop)
            self._spawn_thread("lakeshore-claim", self._claim_loop)
            self._spawn_thread("lakeshore-acks", self._ack_loop)
            if self.notifier.watchdog_interval_s:
                self._spawn_thread("lakeshore-watchdog", self._watchdog_loop)
            while not (self._draining.is_set() or self.fatal is not None):
                self._wake.wait()
                self._wake.clear()
        if self.fatal is not None:
            self._urgent.set()
            self.drain(f"crashed: {self.fatal!r}")
        self._shut_down()
        if isinstance(self.fatal, PlaneUnreachable):
            return EXIT_UNREACHABLE
        if self.fatal is not None:
            return EXIT_CRASHED if started else EXIT_CONFIG
        return EXIT_OK

    def _register(self) -> WorkerInfo | None:
        from ..objects import host_id  # the object store, imported when a worker starts

        # The row advertises the box's host id and every claim names it: jobs whose objects
        # live in this box's tier come here first (plane/locality.py).
        self.host = host_id()
        info = self._worker_info()
        info["lease_s"] = self.config.lease_s
        # What this worker can unpickle: producers pick the pickle protocol from it (protocols.py).
        info[protocols.RUNTIME_KEY] = protocols.runtime()
        if self.config.storage:
            info["storage"] = self.config.storage
        try:
            return self._retry.call(
                "register",
                lambda: self.plane.register_worker(
                    self.config.name,
                    queues=self._every_queue() if self.config.queues is None else self._membership,
                    host=self.host,
                    pid=os.getpid(),
                    info=info,
                ),
                give_up=self._draining,
                bounded=True,
            )
        except GaveUp:
            return None
        except PlaneUnreachable:
            raise
        except DispatchError as exc:  # a wrong token or namespace: retrying will not help
            raise ConfigError(f"the plane refused to register this worker: {exc}") from exc

    def _start_slots(self, factory: SlotFactory) -> bool:
        """Start every slot at once and wait for all; False if one could not start."""
        for i in range(self.config.concurrency):
            slot = factory(i, self)
            self.slots.append(slot)
            slot.start(self._spawn_thread)
        for slot in self.slots:
            while not slot.started.wait(0.2):
                if self._draining.is_set():
                    break
        failed = [s for s in self.slots if s.start_error is not None]
        if failed:
            error = failed[0].start_error
            self._log.error("daemon.slot_start_failed", slot=failed[0].index, error=str(error))
            self.fatal = error
            return False
        return not self._draining.is_set()

    # -- watched threads ----------------------------------------------------------------------

    def _spawn_thread(self, name: str, target: Callable[[], None]) -> threading.Thread:
        def guarded() -> None:
            try:
                target()
            except BaseException as exc:
                if isinstance(exc, PlaneUnreachable):  # an outage, not a bug: no traceback
                    self._log.error("daemon.plane_unreachable", task=name, error=str(exc))
                else:
                    self._log.exception("daemon.task_crashed", task=name)
                if self.fatal is None:
                    self.fatal = exc
                self._wake.set()
                with self._free:
                    self._free.notify_all()

        thread = threading.Thread(target=guarded, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()
        return thread

    # -- claiming -----------------------------------------------------------------------------

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
            riders = self._acks.take_riders()
            try:
                claims = self._claim(queues, room, self._claim_wait(buffered), riders)
            except Exception as exc:
                self._acks.unride(riders)  # the acks thread sends them on its own
                if is_transient(exc):
                    self._retry.unreachable("claim", exc)
                    self._retry.check("claim", exc)  # a burst run's bound
                elif isinstance(exc, DispatchError) and not self.config.raise_refusals:
                    self._log.warning("claim.refused", error=str(exc), queues=queues)
                else:
                    raise
                self._draining.wait(self._retry.pause("claim", backoff))
                continue
            finally:
                self._acks.done(riders)
            self._retry.reachable("claim")
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
        claiming: dict[str, Any] = dict(
            worker=self.config.name,
            limit=room,
            lease_s=self.config.lease_s,
            kind=self.config.kind,
            wait_s=wait_s,
            host=self.host,
        )
        offer = self._offer()
        if offer is not None:
            claiming["free"] = offer
        if not riders:
            return self.plane.claim_many(queues, **claiming)
        errors, claims = self.plane.ack_and_claim([ack for _, ack in riders], queues, **claiming)
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

    # -- the worker row: membership and remote drain ------------------------------------------

    def _queues(self) -> list[str]:
        if time.monotonic() - self._row_read_at >= MEMBERSHIP_POLL_S:
            self._read_row()
        with self._row_lock:
            return list(self._membership)

    def _read_row(self) -> None:
        assert self.worker_id is not None
        worker_id = self.worker_id
        self._row_call("worker", lambda: self.plane.worker(worker_id))

    def _row_call(self, what: str, call: Callable[[], WorkerInfo]) -> bool:
        """Read or write the worker row and apply what comes back; False if it could not."""
        try:
            row = call()
        except NotFound:
            self._row_missing()
            return False
        except Exception as exc:
            if not is_transient(exc):
                raise
            self._retry.unreachable(what, exc)
            return False
        self._retry.reachable(what)
        self._apply_row(row)
        return True

    def _apply_row(self, row: WorkerInfo) -> None:
        membership = self._every_queue() if self.config.queues is None else row.queues
        with self._row_lock:
            self._row_read_at = time.monotonic()
            if membership != self._membership:
                self._log.info(
                    "daemon.membership_changed",
                    queues=membership or (["(none: idle)"] if self._named else ["default"]),
                    previous=self._membership or ["default"],
                )
                self._membership = list(membership)
        if row.state == "preempting" and self.preempt_until is None:
            self.preempt("worker row set to preempting")
        elif row.state in ("draining", "gone") and not self._draining.is_set():
            self._log.info("daemon.remote_drain", row_state=row.state)
            self.drain(f"worker row set to {row.state}")

    def _every_queue(self) -> list[str]:
        namespace = self.plane.namespace
        return sorted(q.name for q in self.plane.queues() if q.namespace == namespace)

    def _row_missing(self) -> None:
        """The plane lost the worker row (a store reset): leave cleanly, a restart re-registers."""
        if not self._draining.is_set():
            self._log.error("daemon.row_missing", worker_id=self.worker_id)
            self.drain("worker row missing on the plane")

    # -- leases and kill requests; the heartbeat: load ----------------------------------------

    def _lease_loop(self) -> None:
        keep_leases(
            self._renew,
            self._halt,
            self.config.lease_s,
            ticked=self._ticked,
            slow=lambda took_s: self._log.warning(
                "lease.renewal_slow", took_s=round(took_s, 3), lease_s=self.config.lease_s
            ),
        )

    def _ticked(self, now: float) -> None:
        self._lease_tick_at = now

    def _heartbeat_loop(self) -> None:
        beat_every = min(self.config.lease_s / 3, HEARTBEAT_MAX_S)
        wait = min(beat_every, KILL_POLL_S)  # the first beat soon: `daemon show` has load to show
        while not self._halt.wait(wait):
            started = time.monotonic()
            self._beat()
            wait = max(0.0, started + beat_every - time.monotonic())

    def _renew(self) -> bool:
        """Renew every lease held, running or buffered; False if the plane did not answer."""
        held = [(slot, claim) for slot in self.slots if (claim := slot.claim) is not None]
        with self._free:
            buffered = list(self._buffer)
        if not held and not buffered:
            return True
        leases = [c.lease for _, c in held] + [c.lease for c in buffered]
        try:
            alive = self.plane.renew(leases, self.config.lease_s)
        except Exception as exc:
            if not is_transient(exc):
                raise
            self._retry.unreachable("renew", exc)
            return False
        self._retry.reachable("renew")
        self._prune_buffer(buffered, alive)
        for slot, claim in held:
            if claim.id not in alive:
                if slot.abort(claim.id, "lost"):
                    self._log.warning("job.lease_lost", invocation=claim.id, slot=slot.index)
            elif alive[claim.id] and slot.abort(claim.id, "killed"):
                self._log.info("job.kill_requested", invocation=claim.id, slot=slot.index)
        return True

    def _prune_buffer(self, buffered: Sequence[Claim], alive: Mapping[str, bool]) -> None:
        """Drop buffered claims whose lease is gone; end those killed before they started."""
        for claim in buffered:
            if claim.id in alive and not alive[claim.id]:
                continue
            with self._free:
                if claim not in self._buffer:
                    continue  # a slot took it meanwhile: the slot's own renewal covers it now
                self._buffer.remove(claim)
            if claim.id not in alive:
                self._log.warning("job.lease_lost", invocation=claim.id, slot=None)
            else:
                why = "killed before it started"
                end = partial(self.plane.end, claim.id, claim.lease, state="killed", error=why)
                if self._settle_call(claim, "end", end):
                    self._log.info("job.killed", invocation=claim.id, error=why)

    def _beat(self) -> None:
        assert self.worker_id is not None
        # The heartbeat's answer is the row as stored: an operator's `daemon drain` survives the
        # heartbeat's own `alive` (the store keeps draining and gone), so one call both reports
        # load and reads membership and state.
        load = self._load()
        load["queues"] = list(self._membership)
        state = "draining" if self._draining.is_set() else "alive"
        worker_id = self.worker_id
        if self._row_call("heartbeat", lambda: self.plane.heartbeat(worker_id, load, state=state)):
            self.notifier.status(self._status_line())

    def _watchdog_loop(self) -> None:
        interval = self.notifier.watchdog_interval_s
        assert interval is not None
        stuck_after = interval * 2  # the whole WatchdogSec: a lease loop that hung
        while not self._halt.wait(interval):
            if time.monotonic() - self._lease_tick_at < stuck_after:
                self.notifier.watchdog()

    def _status_line(self) -> str:
        busy = sum(1 for s in self.slots if s.busy)
        queues = ",".join(self._membership) or "default"
        state = "draining" if self._draining.is_set() else "serving"
        return f"{state} {queues}: {busy}/{len(self.slots)} slots busy"

    # -- JobSink: the only place frames and settles reach the plane ---------------------------

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
        elif outcome.kind == "error" and outcome.cause == "oom":
            self._end_failed(claim, outcome, log)  # out of host memory: said so, not retried
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

    def slot_free(self, slot: Slot) -> None:
        self._start_buffered()

    def checkpoint(self, claim: Claim, data: bytes) -> bytes:
        return checkpoints.store(self, claim, data)

    def post_resume(self, claim: Claim) -> None:
        checkpoints.mark_resume(self, claim)

    def note_cause(self, claim: Claim, cause: str) -> None:
        checkpoints.note_cause(self, claim, cause)

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

    # -- stopping -----------------------------------------------------------------------------

    def _shut_down(self) -> None:
        self._log.info("daemon.draining", reason=self._stop_reason, urgent=self._urgent.is_set())
        self._release_buffer()  # at once, so other workers can take them while these finish
        self.notifier.stopping(self._status_line())
        self._wait_for_slots()
        # A notice's grace was the jobs' time to stop: what is left is killed at once.
        urgent = self._urgent.is_set() or self.preempt_until is not None
        grace = STOP_NOW_GRACE_S if urgent else self.config.kill_grace_s
        for slot in self.slots:
            claim = slot.claim
            if claim is not None and slot.abort(claim.id, "release", grace):
                self._log.info("job.releasing", invocation=claim.id, slot=slot.index)
        for slot in self.slots:
            slot.close()
        for slot in self.slots:
            slot.join()
        self._release_orphans()
        self._release_buffer()
        self._acks.close()
        if not self._acks.wait_idle(ACK_FLUSH_S):
            self._log.error("daemon.acks_unsent")
        self._halt.set()
        with self._free:
            self._free.notify_all()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(self.config.claim_wait_s * 5)
        self._mark_gone()
        self._log.info("daemon.stopped", reason=self._stop_reason)

    def _wait_for_slots(self) -> None:
        """Let running jobs finish, up to drain_timeout_s (heartbeats keep their leases)."""
        started = time.monotonic()
        extended_at = 0.0
        with self._free:
            while any(s.busy for s in self.slots) and not self._urgent.is_set():
                remaining = self._drain_deadline(started) - time.monotonic()
                if remaining <= 0:
                    self._log.warning("daemon.drain_timeout", busy=sum(s.busy for s in self.slots))
                    return
                if time.monotonic() - extended_at >= EXTEND_EVERY_S:
                    self.notifier.extend_timeout(
                        remaining + self.config.kill_grace_s + EXTEND_SLACK_S
                    )
                    self.notifier.status(self._status_line())
                    extended_at = time.monotonic()
                self._free.wait(min(remaining, EXTEND_EVERY_S))

    def _release_orphans(self) -> None:
        """A slot whose thread crashed still holds its claim: give it back."""
        for slot in self.slots:
            claim = slot.claim
            if claim is not None:
                self._settle_call(
                    claim, "release", partial(self.plane.release, claim.id, claim.lease)
                )

    def _release_buffer(self) -> None:
        """Claims still waiting for a slot go back unrun, attempt unspent."""
        with self._free:
            unstarted = list(self._buffer)
            self._buffer.clear()
        for claim in unstarted:
            self._release_unstarted(claim)

    def _mark_gone(self) -> None:
        if self.worker_id is None:
            return
        worker_id = self.worker_id
        try:
            self._retry.call(
                "mark_gone",
                lambda: self.plane.set_worker_state(worker_id, "gone"),
                attempts=GONE_ATTEMPTS,
            )
        except Exception as exc:  # a row left alive just goes stale
            self._log.warning("daemon.mark_gone_failed", error=repr(exc))


def new_post_id() -> str:
    """A frame post's id (see `Plane.post`): random, so no two posts share one."""
    return secrets.token_hex(12)
