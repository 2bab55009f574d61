"""The worker core's observer hooks (sdk/work/observer.py): what the daemon's metrics and its
resource ledger hear, and what an embedding program may watch without subclassing the core."""

from __future__ import annotations

import ast
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore import worker as worker_module
from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.types import Claim
from dreamlake.lakeshore.work.core import WorkerConfig, WorkerCore
from dreamlake.lakeshore.work.inline import InlineSlot
from dreamlake.lakeshore.work.observer import WorkerObserver
from dreamlake.lakeshore.work.retry import Retrier
from dreamlake.lakeshore.work.slot import JobSink, Outcome
from dreamlake.lakeshore.worker import inline_worker

ROOT = Path(__file__).resolve().parents[2]

#: Set by the renewal test's observer; the job waits on it (module level: bodies pickle by name).
RENEWED = threading.Event()


class Recorder(WorkerObserver):
    def __init__(self) -> None:
        self.claimed_ids: list[str] = []
        self.renewals: list[int] = []
        self.errors: list[tuple[str, str]] = []
        self.ended: list[tuple[str, str, float]] = []

    def claimed(self, claims: Sequence[Claim]) -> None:
        self.claimed_ids += [c.id for c in claims]

    def renewed(self, held: int) -> None:
        self.renewals.append(held)
        RENEWED.set()

    def plane_error(self, call: str, kind: str) -> None:
        self.errors.append((call, kind))

    def job_ended(self, claim: Claim, outcome: Outcome, run_s: float) -> None:
        self.ended.append((claim.id, outcome.kind, run_s))


class Raising(WorkerObserver):
    """A broken watcher: every hook raises."""

    def claimed(self, claims: Sequence[Claim]) -> None:
        raise RuntimeError("observer bug")

    def job_ended(self, claim: Claim, outcome: Outcome, run_s: float) -> None:
        raise RuntimeError("observer bug")


def add(x: int, y: int) -> int:
    return x + y


def explode() -> None:
    raise ValueError("boom")


def wait_for_a_renewal() -> bool:
    return RENEWED.wait(30)


@pytest.fixture
def d() -> Iterator[dls.Dispatch]:
    with dls.Dispatch(":memory:") as plane:
        yield plane


@pytest.fixture(autouse=True)
def quick_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_module, "CLAIM_WAIT_S", 0.05)


def test_observers_hear_each_claim_and_each_run_end_whatever_its_outcome(
    d: dls.Dispatch,
) -> None:
    q = dls.SyncQueue("observed", dispatch=d)
    ok = q.submit(dls.thunk(add, 2, 3))
    bad = q.submit(dls.thunk(explode))
    core = inline_worker(d, ["observed"], burst=True)
    seen = Recorder()
    core.observers.add(Raising())  # first: a broken observer must not keep the next from hearing
    core.observers.add(seen)

    core.run()

    assert core.fatal is None and core.started_jobs == 2  # the raising observer stopped nothing
    assert sorted(seen.claimed_ids) == sorted([ok, bad])
    assert {(i, kind) for i, kind, _ in seen.ended} == {(ok, "ok"), (bad, "error")}
    assert all(run_s >= 0 for _, _, run_s in seen.ended)
    assert q.result(ok, timeout=5) == 5


def test_observers_hear_the_renewals_of_held_leases(d: dls.Dispatch) -> None:
    RENEWED.clear()
    q = dls.SyncQueue("renewed", dispatch=d)
    inv = q.submit(dls.thunk(wait_for_a_renewal))
    core = inline_worker(d, ["renewed"], burst=True, lease_s=0.9)  # renewed 0.3 s apart
    seen = Recorder()
    core.observers.add(seen)

    core.run()

    assert q.result(inv, timeout=5) is True  # the job saw the observer hear a renewal
    assert seen.renewals and all(held == 1 for held in seen.renewals)


def test_a_refused_claim_is_a_plane_error_the_observers_hear(d: dls.Dispatch) -> None:
    def refuse(names: Sequence[str], limit: int, wait_s: float) -> list[Claim]:
        raise InvalidArgument("no such kind of claim")

    class DrainOnError(Recorder):
        def plane_error(self, call: str, kind: str) -> None:
            super().plane_error(call, kind)
            core.drain("refused")

    def slot(index: int, sink: JobSink) -> InlineSlot:
        return InlineSlot(index, sink, plane=d)

    seen = DrainOnError()
    config = WorkerConfig(name="refused", queues=("q",), claim_wait_s=0.05)
    core = WorkerCore(d, config, slot, claimer=refuse, observers=[seen])

    core.run()

    assert seen.errors[0] == ("claim", "refused")
    assert seen.claimed_ids == []


def test_every_failed_try_of_an_unreachable_plane_is_heard_though_logged_once() -> None:
    seen = Recorder()
    lines: list[str] = []

    class Log:
        def warning(self, event: str, **fields: object) -> None:
            lines.append(event)

    retrier = Retrier(Log(), observer=seen)
    for _ in range(3):
        retrier.unreachable("renew", ConnectionError("refused"))

    assert seen.errors == [("renew", "unreachable")] * 3
    assert lines == ["plane.unreachable"]


def test_the_daemon_counts_through_observers_not_by_overriding_the_core() -> None:
    """The daemon once overrode `_claim`, `_renew` and the retrier to count; a subclass that
    reaches into the core's private methods breaks when the core changes."""
    tree = ast.parse((ROOT / "daemon" / "worker.py").read_text())
    daemon = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Daemon")
    defined = {n.name for n in daemon.body if isinstance(n, ast.FunctionDef)}
    assert not defined & {"_claim", "_renew", "_job_ended"}
    retriers = [
        n
        for n in tree.body
        if isinstance(n, ast.ClassDef)
        and any(isinstance(b, ast.Name) and b.id == "Retrier" for b in n.bases)
    ]
    assert retriers == []
