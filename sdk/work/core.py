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
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

from dreamlake.lakeshore import protocols
from dreamlake.lakeshore.errors import DispatchError, NotFound
from dreamlake.lakeshore.plane.base import Plane, Pushes
from dreamlake.lakeshore.types import Claim, WorkerInfo
from dreamlake.lakeshore.work.leases import KILL_POLL_S, keep_leases

from . import checkpoints
from .acks import AckQueue
from .claiming import Claiming
from .config import (
    ACK_FLUSH_S,
    BURST_GIVE_UP_S,
    CLAIM_WAIT_S,
    EXIT_CONFIG,
    EXIT_CRASHED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXTEND_EVERY_S,
    EXTEND_SLACK_S,
    GONE_ATTEMPTS,
    HEARTBEAT_MAX_S,
    MEMBERSHIP_POLL_S,
    STOP_NOW_GRACE_S,
    Claimer,
    ConfigError,
    Notifier,
    SilentNotifier,
    WorkerConfig,
)
from .log import EventLogger
from .observer import Observers, WorkerObserver
from .retry import GaveUp, PlaneUnreachable, Retrier, is_transient
from .settling import new_post_id
from .slot import JobSink, Outcome, Slot, SlotFactory

#: The names callers import from here, those that moved to config.py and settling.py included.
__all__ = [
    "ACK_FLUSH_S",
    "BURST_GIVE_UP_S",
    "CLAIM_WAIT_S",
    "EXIT_CONFIG",
    "EXIT_CRASHED",
    "EXIT_OK",
    "EXIT_UNREACHABLE",
    "EXTEND_EVERY_S",
    "EXTEND_SLACK_S",
    "GONE_ATTEMPTS",
    "HEARTBEAT_MAX_S",
    "MEMBERSHIP_POLL_S",
    "STOP_NOW_GRACE_S",
    "Claimer",
    "ConfigError",
    "Notifier",
    "SilentNotifier",
    "WorkerConfig",
    "WorkerCore",
    "new_post_id",
]

T = TypeVar("T")


class WorkerCore(Claiming, JobSink):
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
        observers: Sequence[WorkerObserver] = (),
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
        #: Renew now: the plane pushed news of a held job (a kill asked); set with _halt too.
        self._renew_now = threading.Event()
        self._wake = threading.Event()  # the main thread has something to look at
        self._free = threading.Condition()  # a slot became free, or the worker is stopping
        self._stop_reason = ""
        self._lease_tick_at = time.monotonic()
        self._threads: list[threading.Thread] = []
        #: Who hears of claims, renewals, plane errors and ended runs (observer.py).
        self.observers = Observers(observers, self._log)
        self._retry = Retrier(
            self._log, give_up_s=config.give_up_unreachable_s, observer=self.observers
        )
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
        """What the `worker.ready` line says besides the worker, its queues and concurrency."""
        return {}

    def _on_ready(self) -> None:
        self._log.info(
            "worker.ready",
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
            self._log.error("worker.plane_unreachable", error=str(exc))
            return EXIT_UNREACHABLE
        if worker is None:
            return EXIT_OK  # asked to stop before the plane could be reached
        self.worker_id = worker.id
        self._apply_row(worker)
        if isinstance(self.plane, Pushes):
            self.plane.on_push(self.config.name, self._pushed)
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
        from dreamlake.lakeshore.objects import (
            host_id,  # the object store, imported when a worker starts
        )

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
            self._log.error("worker.slot_start_failed", slot=failed[0].index, error=str(error))
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
                    self._log.error("worker.plane_unreachable", task=name, error=str(exc))
                else:
                    self._log.exception("worker.task_crashed", task=name)
                if self.fatal is None:
                    self.fatal = exc
                self._wake.set()
                with self._free:
                    self._free.notify_all()

        thread = threading.Thread(target=guarded, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()
        return thread

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
                    "worker.membership_changed",
                    queues=membership or (["(none: idle)"] if self._named else ["default"]),
                    previous=self._membership or ["default"],
                )
                self._membership = list(membership)
        if row.state == "preempting" and self.preempt_until is None:
            self.preempt("worker row set to preempting")
        elif row.state in ("draining", "gone") and not self._draining.is_set():
            self._log.info("worker.remote_drain", row_state=row.state)
            self.drain(f"worker row set to {row.state}")

    def _every_queue(self) -> list[str]:
        namespace = self.plane.namespace
        return sorted(q.name for q in self.plane.queues() if q.namespace == namespace)

    def _row_missing(self) -> None:
        """The plane lost the worker row (a store reset): leave cleanly, a restart re-registers."""
        if not self._draining.is_set():
            self._log.error("worker.row_missing", worker_id=self.worker_id)
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
            now_please=self._renew_now,
        )

    def _pushed(self, kind: str) -> None:
        """The plane's news, on its thread: a kill asked for a job held here ("renew")."""
        if kind == "renew":
            self._log.info("worker.pushed", kind=kind)
            self._renew_now.set()

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
        self.observers.renewed(len(leases))
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

    # -- JobSink: the slot-facing calls that are not settles (settling.py has those) --------

    def job_ended(self, claim: Claim, outcome: Outcome, run_s: float) -> None:
        self.observers.job_ended(claim, outcome, run_s)

    def slot_free(self, slot: Slot) -> None:
        self._start_buffered()

    def checkpoint(self, claim: Claim, data: bytes) -> bytes | None:
        return checkpoints.store(self, claim, data)

    def post_resume(self, claim: Claim) -> None:
        checkpoints.mark_resume(self, claim)

    def note_cause(self, claim: Claim, cause: str) -> None:
        checkpoints.note_cause(self, claim, cause)

    # -- stopping -----------------------------------------------------------------------------

    def _shut_down(self) -> None:
        self._log.info("worker.draining", reason=self._stop_reason, urgent=self._urgent.is_set())
        self._say_draining()
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
            self._log.error("worker.acks_unsent")
        self._halt.set()
        self._renew_now.set()
        with self._free:
            self._free.notify_all()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(self.config.claim_wait_s * 5)
        self._mark_gone()
        self._log.info("worker.stopped", reason=self._stop_reason)

    def _say_draining(self) -> None:
        """Tell the plane now, not at the next heartbeat: it lets go of the claim waiting there
        for work, so an idle worker stops at once instead of after its long-poll."""
        if self.worker_id is None or self._claimer is not None:
            return
        try:
            self._beat()
        except Exception as exc:  # only a hint: the long-poll ends on its own within its wait
            self._log.warning("worker.drain_unsaid", error=repr(exc))

    def _wait_for_slots(self) -> None:
        """Let running jobs finish, up to drain_timeout_s (heartbeats keep their leases)."""
        started = time.monotonic()
        extended_at = 0.0
        with self._free:
            while any(s.busy for s in self.slots) and not self._urgent.is_set():
                remaining = self._drain_deadline(started) - time.monotonic()
                if remaining <= 0:
                    self._log.warning("worker.drain_timeout", busy=sum(s.busy for s in self.slots))
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
            self._log.warning("worker.mark_gone_failed", error=repr(exc))
