"""The daemon's loop in this process, on the in-memory plane (its children are still real).

Faster than the e2e suite and able to inject faults into the plane: an outage the daemon must
ride out, a side task that crashes, a settle that arrives after the lease moved on.
"""

from __future__ import annotations

import multiprocessing.connection
import operator
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.daemon.metrics import DaemonMetrics
from dreamlake.lakeshore.daemon.worker import (
    EXIT_CRASHED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    Daemon,
    DaemonConfig,
)
from dreamlake.lakeshore.errors import LeaseLost
from dreamlake.lakeshore.plane import Dispatch
from dreamlake.lakeshore.work.retry import PlaneUnreachable
from dreamlake.lakeshore.work.slot import Outcome
from tests.support import claiming


def wait_until(check: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
    return value


class FaultyPlane:
    """Wraps a plane; `down` makes every call fail as if unreachable, `broken` names a call
    that raises a programming error (a bug the daemon must not survive half alive),
    `unreachable` names calls that fail as if the plane were away while the others answer, and
    `hang(name)` makes that call wait until the event it returns is set."""

    def __init__(self, inner: Dispatch) -> None:
        self.inner = inner
        self.namespace = inner.namespace
        self.down = threading.Event()
        self.broken: str | None = None
        self.unreachable: set[str] = set()
        self.calls: list[str] = []
        self.hanging: dict[str, threading.Event] = {}
        self.hung: list[str] = []  # calls that are waiting in a hang now

    def hang(self, name: str) -> threading.Event:
        release = self.hanging[name] = threading.Event()
        return release

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.inner, name)
        if not callable(target):
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            if self.broken == name:
                raise RuntimeError(f"bug in {name}")
            if (self.down.is_set() and name != "close") or name in self.unreachable:
                raise ConnectionRefusedError("plane unreachable")
            if name in self.hanging:
                self.hung.append(name)
                self.hanging[name].wait()
                self.hung.remove(name)
            return target(*args, **kwargs)

        return call


class Running:
    """A daemon on a thread; `stop()` drains it and returns its exit code."""

    def __init__(self, plane: Any, metrics: DaemonMetrics | None = None, **config: Any) -> None:
        config.setdefault("name", "unit")
        config.setdefault("queues", ("q",))
        config.setdefault("lease_s", 3.0)
        config.setdefault("kill_grace_s", 0.5)
        self.daemon = Daemon(plane, DaemonConfig(**config), gpus=[], metrics=metrics)
        self.code: int | None = None
        self.thread = threading.Thread(target=self._run)
        self.thread.start()
        wait_until(
            lambda: (
                (self.daemon.slots and all(s.started.is_set() for s in self.daemon.slots))
                or self.code is not None
            ),
            what="slots",
        )

    def _run(self) -> None:
        self.code = self.daemon.run()

    def join(self, timeout: float = 30.0) -> int | None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the daemon did not stop"
        return self.code

    def stop(self) -> int | None:
        self.daemon.drain("test over")
        return self.join()


@pytest.fixture
def plane() -> Iterator[Dispatch]:
    with Dispatch(":memory:") as plane:
        yield plane


def test_runs_jobs_and_drains_on_request(plane: Dispatch) -> None:
    q = dls.SyncQueue("q", dispatch=plane)
    running = Running(plane, concurrency=2)
    try:
        ids = [q.submit(dls.thunk(operator.mul, n, n)) for n in range(6)]
        assert [q.result(i, timeout=20) for i in ids] == [n * n for n in range(6)]
    finally:
        assert running.stop() == EXIT_OK
    assert plane.worker(running.daemon.worker_id or "").state == "gone"


def test_an_idle_daemon_stops_without_waiting_out_its_claims_long_poll(plane: Dispatch) -> None:
    # Given an idle daemon whose claim waits four times longer for work than `stop` waits
    running = Running(plane, claim_wait_s=120.0)
    worker_id = running.daemon.worker_id or ""
    assert plane.worker(worker_id).state == "alive"

    # When it is drained, then it stops: its drain let go of the waiting claim
    assert running.stop() == EXIT_OK
    assert plane.worker(worker_id).state == "gone"


def test_a_slot_looks_at_its_childs_pipe_without_building_a_selector(
    plane: Dispatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a daemon whose children are up, and every selector-built wait on a pipe counted
    running = Running(plane)
    looks: list[object] = []
    real_wait = multiprocessing.connection.wait

    def counted_wait(*args: Any, **kwargs: Any) -> Any:
        looks.append(args)
        return real_wait(*args, **kwargs)

    monkeypatch.setattr(multiprocessing.connection, "wait", counted_wait)
    try:
        # When jobs run and answer
        q = dls.SyncQueue("q", dispatch=plane)
        ids = [q.submit(dls.thunk(operator.mul, n, n)) for n in range(3)]
        assert [q.result(i, timeout=20) for i in ids] == [0, 1, 4]

        # Then the slot read their answers through its own poll object, not
        # `Connection.poll()`, which builds and tears down a selector on every look
        assert looks == []
    finally:
        assert running.stop() == EXIT_OK


def test_construction_has_no_side_effects(plane: Dispatch) -> None:
    daemon = Daemon(plane, DaemonConfig(name="idle"), gpus=[])
    assert daemon.worker_id is None and daemon.slots == []
    assert plane.workers() == []


def test_membership_is_reread_from_the_worker_row(plane: Dispatch) -> None:
    other = dls.SyncQueue("other", dispatch=plane)
    running = Running(plane)
    try:
        plane.update_worker_queues("unit", add=["other"])
        assert other.result(other.submit(dls.thunk(operator.add, 1, 2)), timeout=20) == 3
    finally:
        running.stop()


def test_an_outage_is_ridden_out_and_the_job_still_settles(plane: Dispatch) -> None:
    faulty = FaultyPlane(plane)
    q = dls.SyncQueue("q", dispatch=plane)
    running = Running(faulty, lease_s=30.0)
    try:
        inv = q.submit(dls.thunk(time.sleep, 0.5))
        wait_until(lambda: q.status(inv).state == "running", what="running")
        faulty.down.set()
        wait_until(lambda: faulty.calls.count("ack_many") >= 1, what="an ack attempt while down")
        assert q.status(inv).state == "running"  # its outcome is held, not lost
        faulty.down.clear()
        assert q.result(inv, timeout=20) is None
        assert running.thread.is_alive()
    finally:
        assert running.stop() == EXIT_OK


def test_a_crashed_side_task_stops_the_daemon_and_releases_its_job(plane: Dispatch) -> None:
    faulty = FaultyPlane(plane)
    q = dls.SyncQueue("q", dispatch=plane)
    running = Running(faulty)
    inv = q.submit(dls.thunk(time.sleep, 60))
    wait_until(lambda: q.status(inv).state == "running", what="running")
    faulty.broken = "heartbeat"
    assert running.join() == EXIT_CRASHED
    # Interrupted, not failed (issue 35): a preemption, its attempt not charged.
    row = q.status(inv)
    assert (row.state, row.attempt, row.preemptions, row.ended_by) == ("queued", 1, 1, "notice")


def test_a_heartbeat_that_hangs_does_not_hold_back_lease_renewals(
    plane: Dispatch, tmp_path: Path
) -> None:
    # Given a daemon whose heartbeat hangs, as its load figures and row write took seconds on
    # a box saturated by CPU-bound jobs (issue 33, item 2), and a job that runs until told
    faulty = FaultyPlane(plane)
    release = faulty.hang("heartbeat")
    q = dls.SyncQueue("q", dispatch=plane)
    running = Running(faulty, lease_s=1.5)
    try:
        inv = q.submit(gate_on(tmp_path / "open", started=tmp_path / "started"))
        wait_until(lambda: (tmp_path / "started").exists(), what="the job in its slot")
        wait_until(lambda: "heartbeat" in faulty.hung, what="the heartbeat to hang")

        # When the heartbeat stays stuck, the job's lease is renewed all the same
        renewed = faulty.calls.count("renew")
        wait_until(
            lambda: faulty.calls.count("renew") >= renewed + 3,
            what="lease renewals while the heartbeat hangs",
        )
        assert "heartbeat" in faulty.hung

        # Then the job ends on its first attempt, its lease never lost
        (tmp_path / "open").touch()
        assert q.result(inv, timeout=20) == 0
        assert q.status(inv).attempt == 1
    finally:
        release.set()
        (tmp_path / "open").touch()
        assert running.stop() == EXIT_OK


def test_a_burst_run_whose_claims_cannot_reach_the_plane_gives_up_at_its_bound(
    plane: Dispatch,
) -> None:
    # Given a burst daemon that registered, whose claims then find the plane unreachable
    faulty = FaultyPlane(plane)
    faulty.unreachable = {"claim_many", "ack_and_claim"}
    running = Running(faulty, burst=True, give_up_unreachable_s=1.0)

    # Then it stops at the bound instead of retrying for ever, and says why
    assert running.join() == EXIT_UNREACHABLE
    assert isinstance(running.daemon.fatal, PlaneUnreachable)
    assert "claim" in str(running.daemon.fatal)
    assert plane.worker(running.daemon.worker_id or "").state == "gone"


def test_a_late_settle_refused_with_lease_lost_is_dropped(plane: Dispatch) -> None:
    q = dls.SyncQueue("q", dispatch=plane)
    q.submit(dls.thunk(operator.add, 1, 1))
    stale = claiming.claim(plane, ["q"], worker="old", lease_s=0.05)
    assert stale is not None
    fresh = wait_until(
        lambda: claiming.claim(plane, ["q"], worker="new", lease_s=30), what="re-dispatch"
    )
    daemon = Daemon(plane, DaemonConfig(name="late"), gpus=[])
    daemon.settle(stale, Outcome("ok", result=dls.encode(2)))  # queued for the ack thread
    daemon._acks.close()
    daemon._ack_loop()  # sends the batch: the refusal is logged, never raised
    with pytest.raises(LeaseLost):
        plane.ack(stale.id, stale.lease, dls.encode(2))
    plane.ack(fresh.id, fresh.lease, dls.encode(2))
    assert q.result(stale.id, timeout=1) == 2


def gate_on(path: Path, started: Path | None = None) -> Any:
    """A job that runs until `path` exists: the test, not the clock, decides when it ends.
    With `started`, it creates that file first: the test can tell it is running in a slot, not
    only claimed (a claim commits before the daemon hands it to a slot)."""
    begin = f"touch '{started}'; " if started else ""
    return dls.thunk(os.system, f"{begin}while [ ! -e '{path}' ]; do sleep 0.02; done")


def test_prefetch_claims_ahead_and_every_job_still_runs_once(
    plane: Dispatch, tmp_path: Path
) -> None:
    q = dls.SyncQueue("q", dispatch=plane)
    gate = q.submit(gate_on(tmp_path / "open"))
    rest = [q.submit(dls.thunk(operator.add, n, 1)) for n in range(6)]
    running = Running(plane, prefetch=4)
    try:
        # One slot busy with the gate, four claimed ahead of it, two left queued.
        wait_until(lambda: q.count("running") == 5, what="a prefetched batch")
        assert q.count("queued") == 2
        (tmp_path / "open").touch()
        assert [q.result(i, timeout=20) for i in rest] == [n + 1 for n in range(6)]
        assert q.result(gate, timeout=20) == 0
    finally:
        (tmp_path / "open").touch()
        assert running.stop() == EXIT_OK
    assert {plane.invocation(i).attempt for i in [gate, *rest]} == {1}


def test_a_drain_gives_prefetched_jobs_back_unspent(plane: Dispatch, tmp_path: Path) -> None:
    q = dls.SyncQueue("q", dispatch=plane)
    gate = q.submit(gate_on(tmp_path / "open", started=tmp_path / "started"))
    rest = [q.submit(dls.thunk(operator.add, n, 1)) for n in range(3)]
    running = Running(plane, prefetch=3)
    # The gate running in its slot, the rest claimed with it: buffered before it was handed on
    wait_until(lambda: (tmp_path / "started").exists(), what="the gate job in its slot")
    wait_until(lambda: q.count("running") == 4, what="a prefetched batch")

    running.daemon.drain("test over")  # before the gate opens: nothing more may start
    (tmp_path / "open").touch()
    assert running.join() == EXIT_OK

    assert q.result(gate, timeout=1) == 0  # the running job finished
    assert [(q.status(i).state, q.status(i).attempt) for i in rest] == [("queued", 0)] * 3


def test_a_prefetched_job_killed_before_it_starts_ends_killed(plane: Dispatch) -> None:
    q = dls.SyncQueue("q", dispatch=plane)
    gate = q.submit(dls.thunk(time.sleep, 3.0))
    waiting = q.submit(dls.thunk(operator.add, 1, 1))
    running = Running(plane, prefetch=1)
    try:
        wait_until(lambda: q.count("running") == 2, what="a prefetched job")
        assert q.cancel(waiting, kill=True)
        wait_until(lambda: q.status(waiting).state == "killed", what="the kill")
        assert q.result(gate, timeout=20) is None
    finally:
        assert running.stop() == EXIT_OK


def test_a_daemon_whose_last_queue_is_removed_idles_instead_of_serving_default(
    plane: Dispatch,
) -> None:
    default = dls.SyncQueue("default", dispatch=plane)
    other = dls.SyncQueue("other", dispatch=plane)
    running = Running(plane, queues=("gpu-only",), lease_s=1.5)
    try:
        plane.update_worker_queues("unit", remove=["gpu-only"])  # as `queues rm --force` does
        wait_until(
            lambda: plane.worker("unit").load.get("queues") == [], what="the daemon to see it"
        )
        stray = default.submit(dls.thunk(operator.add, 1, 1))
        plane.update_worker_queues("unit", add=["other"])
        # By the time a job of the queue added after it has run, the daemon has claimed again.
        assert other.result(other.submit(dls.thunk(operator.add, 2, 2)), timeout=20) == 4
        assert default.status(stray).state == "queued"
    finally:
        assert running.stop() == EXIT_OK


class _Recorder(DaemonMetrics):
    """The daemon's metrics, keeping each ended run's measured seconds as well."""

    def __init__(self) -> None:
        super().__init__()
        self.run_s: list[float] = []

    def job_ended(self, claim: Any, outcome: Outcome, run_s: float) -> None:
        super().job_ended(claim, outcome, run_s)
        self.run_s.append(run_s)


def test_a_jobs_run_clock_starts_before_its_child_can_begin(
    plane: Dispatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a daemon whose thread, each time it has written to a child's pipe, is held back
    # before it runs again, as a thread waiting out another's GIL switch interval is (the
    # e2e metrics test once measured 1.1953 s for a 1.2 s sleep that way)
    write = multiprocessing.connection.Connection._send_bytes  # type: ignore[attr-defined]

    def held_back_after(self: Any, buf: Any) -> None:
        write(self, buf)
        time.sleep(0.2)

    monkeypatch.setattr(multiprocessing.connection.Connection, "_send_bytes", held_back_after)
    metrics = _Recorder()
    q = dls.SyncQueue("q", dispatch=plane)
    running = Running(plane, metrics=metrics)
    try:
        # when it runs a job whose body sleeps 0.5 s
        inv = q.submit(dls.thunk(time.sleep, 0.5))
        q.result(inv, timeout=20)
    finally:
        assert running.stop() == EXIT_OK
    # then the run time it measured holds the whole body: its clock started before the
    # write that let the child begin, not once the writing thread ran again
    assert len(metrics.run_s) == 1
    assert metrics.run_s[0] >= 0.5


@pytest.mark.parametrize(
    ("gpus", "cpus", "slots"),
    [(0, None, 1), (0, 3.0, 3), (1, 3.0, 3), (4, 2.0, 4), (1, None, None)],
)
def test_default_slots_are_what_the_resources_allow(
    plane: Dispatch, gpus: int, cpus: float | None, slots: int | None
) -> None:
    """Issue 45: no --concurrency is what the box allows, bounded by its CPUs (its cores when
    --cpus is not given), at least one per GPU; no GPU and no --cpus keeps one slot."""
    from dreamlake.lakeshore.daemon.inventory import Gpu
    from dreamlake.lakeshore.daemon.worker import _cores

    config = DaemonConfig(name="auto", cpus=cpus, auto_concurrency=True)
    box = [Gpu(index=i, uuid=f"declared-{i}", name="GPU", memory_mb=1024) for i in range(gpus)]
    daemon = Daemon(plane, config, gpus=box)
    assert daemon._auto_slots(box) == (slots if slots is not None else max(1, _cores()))
