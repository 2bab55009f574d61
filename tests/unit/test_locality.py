"""Locality on the producer's side (the hint a submit computes from its Refs) and on the
claim's (timed wake-ups, stealing, the worker core naming its host)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore import locality, objects, spill
from dreamlake.lakeshore.plane import waiting
from dreamlake.lakeshore.plane.dispatch import Dispatch
from dreamlake.lakeshore.plane.wakeup import Waker
from dreamlake.lakeshore.ref import Ref
from dreamlake.lakeshore.types import SubmitRequest
from dreamlake.lakeshore.worker import inline_worker
from tests.support import claiming

MiB = 1 << 20


def far_ref(host: str, size: int, n: int = 0) -> Ref:
    """A Ref to an object another box put: only its fields matter to a hint (nothing is read)."""
    return Ref(id=f"{n:026d}", size=size, digest="0" * 32, host=host, storage="file:///x")


def scale(x: object, by: float = 1.0) -> object:
    return x


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Spills kept in this box's host tier only: no storage tier to write through to."""
    monkeypatch.setenv("LAKESHORE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LAKESHORE_SPILL_DURABLE", "0")
    yield tmp_path


@pytest.fixture
def d() -> Iterator[Dispatch]:
    with Dispatch(":memory:") as plane:
        yield plane


# -- the hint ------------------------------------------------------------------------------------


def test_refs_are_found_in_containers_call_arguments_and_raw_envelopes() -> None:
    a, b, c, e = (far_ref("box-b", MiB, n) for n in range(4))
    body = dls.Envelope.for_thunk(dls.thunk(scale, {"w": [a, (b,)]}, by=c))
    assert {r.id for r in locality.refs_in(body)} == {a.id, b.id, c.id}
    assert locality.refs_in(dls.Envelope.for_raw({"x": e})) == [e]
    assert locality.refs_in(np.zeros(3)) == [] and locality.refs_in("text") == []


def test_the_search_for_refs_is_bounded() -> None:
    hidden = [0] * 50_000 + [far_ref("box-b", MiB)]
    assert locality.refs_in(hidden, budget=1000) == []


def test_the_hint_is_the_host_holding_most_bytes_above_the_least() -> None:
    refs = [
        far_ref("box-a", 3 * MiB, 1),
        far_ref("box-b", 2 * MiB, 2),
        far_ref("box-b", 2 * MiB, 3),
    ]
    assert locality.host_of(refs) == "box-b"
    assert locality.host_of([*refs, refs[1], refs[1]]) == "box-b"  # each object once
    assert locality.host_of(refs, least=4 * MiB) is None
    assert locality.host_of([Ref(id="0" * 26, size=MiB, digest="0" * 32)]) is None  # no host


def test_a_small_payload_has_no_hint(home: Path) -> None:
    data, host, _ = spill.dumps_located({"lr": 0.1, "steps": 10})
    assert host is None and dls.decode(data) == {"lr": 0.1, "steps": 10}


def test_a_spilled_array_or_argument_hints_at_this_box(home: Path) -> None:
    _, host, _ = spill.dumps_located(np.ones(MiB, dtype=np.float32))
    assert host == objects.host_id()

    _, host, _ = spill.dumps_located(dls.thunk(scale, np.ones(MiB, dtype=np.float32), by=2.0))
    assert host == objects.host_id()


def test_user_refs_hint_at_the_box_that_holds_most(home: Path) -> None:
    local = np.ones(MiB // 4, dtype=np.float32)  # 1 MiB, spilled here
    _, host, _ = spill.dumps_located(dls.thunk(scale, local, by=far_ref("box-b", 8 * MiB)))
    assert host == "box-b"
    _, host, _ = spill.dumps_located(dls.thunk(scale, local, by=far_ref("box-b", 1000)))
    assert host == objects.host_id()


def test_a_submit_sends_its_hint_and_a_claim_elsewhere_passes_the_job_by(
    home: Path, d: Dispatch
) -> None:
    d.create_queue("loc", admission={"locality_wait_s": 60})
    q = dls.SyncQueue("loc", dispatch=d)
    inv = q.submit({"weights": far_ref("box-b", 8 * MiB)})
    many = q.submit_many([{"w": far_ref("box-b", 8 * MiB, 1)}, {"plain": 1}])

    assert [c.id for c in claiming.claim_many(d, ["loc"], worker="w", limit=5, host="box-c")] == [
        many[1]
    ]
    got = claiming.claim_many(d, ["loc"], worker="w", limit=5, host="box-b")
    assert [c.id for c in got] == [inv, many[0]]


# -- the claim -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind",
    [None, "fifo"],
    ids=["window read with the queue row", "kind given: window read on its own"],
)
def test_an_idle_claim_wakes_when_the_window_ends_not_at_its_safety_poll(
    d: Dispatch, monkeypatch: pytest.MonkeyPatch, kind: str | None
) -> None:
    # Only the timed wake-up can end it soon (Deadline.nap reads the poll from `waiting`).
    monkeypatch.setattr(waiting, "SAFETY_POLL_S", 30.0)
    d.create_queue("loc", admission={"locality_wait_s": 0.3})
    (inv,) = d.submit("loc", [SubmitRequest(payload=b"\x01", host="box-a")])

    start = time.monotonic()
    got = claiming.claim(d, ["loc"], worker="w", host="box-b", wait_s=20, kind=kind)

    assert got is not None and got.id == inv
    assert time.monotonic() - start < 5


def test_a_timed_wake_up_keeps_the_earliest_per_key_and_close_cancels_it() -> None:
    waker = Waker()
    before = waker.generation
    waker.notify_at(time.time() + 0.05, work=["ns/q"])
    waker.notify_at(time.time() + 60, work=["ns/q"])  # later: the pending one stands
    assert waker.wait(before, 5) and waker.work_since(before, ["ns/q"])
    waker.notify_at(time.time() + 60, work=["ns/q"])
    waker.close()
    assert not waker._timers


def test_stealing_an_aged_job_still_respects_its_host(d: Dispatch) -> None:
    pool = {"kind": "fixed", "max": 1}
    d.create_queue("mine", elasticity=pool)
    d.create_queue(
        "theirs",
        elasticity={**pool, "steal_delay_s": 0.01},
        admission={"locality_wait_s": 60},
    )
    (held,) = d.submit("theirs", [SubmitRequest(payload=b"t", host="box-a")])
    time.sleep(0.02)  # age the job past the steal delay (the delay itself is not tested here)

    assert claiming.claim(d, ["mine", "theirs"], worker="w", host="box-b") is None
    stolen = claiming.claim(d, ["mine", "theirs"], worker="w", host="box-a")
    assert stolen is not None and stolen.id == held


def test_a_worker_advertises_and_claims_as_this_box(
    d: Dispatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKESHORE_HOST_ID", "box-a")
    d.create_queue("loc", admission={"locality_wait_s": 60})
    (elsewhere,) = d.submit("loc", [SubmitRequest(payload=dls.encode(2), host="box-b")])
    (here,) = d.submit("loc", [SubmitRequest(payload=dls.encode(1), host="box-a")])

    core = inline_worker(d, ["loc"], burst=True, burst_wait_s=0.05, handler=lambda x: x)
    assert core.run() == 0

    assert d.invocation(here).state == "succeeded"
    assert d.invocation(elsewhere).state == "queued"
    assert core.worker_id is not None and d.worker(core.worker_id).host == "box-a"
    assert dls.SyncQueue("loc", dispatch=d).claim() is None  # a custom worker's claim too
