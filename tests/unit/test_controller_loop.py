"""The controller's ticks on the in-memory plane and the recording fake provider.

The test plays the daemons: it registers worker rows for launched instances
(`FakeProvider.register_all`), claims and acks jobs, and marks rows gone as an exiting daemon
does. Time is a clock the test advances; nothing sleeps.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from dreamlake.lakeshore.controller.loop import Controller, Settings
from dreamlake.lakeshore.plane import Dispatch
from dreamlake.lakeshore.plane.leader import FileLeader
from dreamlake.lakeshore.providers.fake import FakeProvider
from dreamlake.lakeshore.types import SubmitRequest
from tests.support import claiming


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def d() -> Iterator[Dispatch]:
    plane = Dispatch(":memory:")
    plane.store.add_provider("default", "sim", "fake", {"instance_type": "small"})
    yield plane
    plane.close()


@pytest.fixture
def fake() -> FakeProvider:
    return FakeProvider("sim")


def controller(d: Dispatch, fake: FakeProvider, clock: Clock, **settings: object) -> Controller:
    fake.clock = clock
    opts = {"scale_down_window_s": 0.0, "boot_timeout_s": 60.0, **settings}
    return Controller(d.store, Settings(**opts), provider_factory=lambda _: fake, clock=clock)  # type: ignore[arg-type]


def submit(d: Dispatch, queue: str, n: int) -> None:
    d.submit(queue, [SubmitRequest(payload=b"x") for _ in range(n)])


def drain_jobs(d: Dispatch, queues: list[str]) -> None:
    while (claim := claiming.claim(d, queues, worker="test")) is not None:
        d.ack(claim.id, claim.lease, None)


def kinds(d: Dispatch, queue: str) -> list[str]:
    return [e["kind"] for e in reversed(d.events(queue, limit=100))]


def test_fully_elastic_activates_scales_up_within_max_and_back_to_zero(
    d: Dispatch, fake: FakeProvider
) -> None:
    clock = Clock()
    d.create_queue(
        "gpu", elasticity={"kind": "fully_elastic", "max": 4, "idle_s": 30, "provider": "sim"}
    )
    c = controller(d, fake, clock)

    # given 50 jobs on an empty fleet: launch at once, up to max
    submit(d, "gpu", 50)
    [decision] = c.tick()
    assert (decision.desired, decision.launch) == (4, 4)
    assert fake.launched() == 4

    # the daemons register; a second tick launches nothing more
    fake.register_all(d.store)
    clock.now += 1
    assert c.tick()[0].launch == 0 and fake.launched() == 4

    # the work is done: hold for idle_s, then drain every (idle) worker
    drain_jobs(d, ["gpu"])
    clock.now += 1
    assert c.tick()[0].drain == 0
    clock.now += 31
    assert c.tick()[0].drain == 4
    assert {w.state for w in d.workers()} == {"draining"}

    # the daemons leave: their instances are terminated, the fleet is empty
    for w in d.workers():
        d.set_worker_state(w.id, "gone")
    clock.now += 1
    assert c.tick()[0].terminate == 4
    assert fake.list() == []
    assert kinds(d, "gpu")[1:] == [
        "scaled",
        "scaled",
        "terminated",
        "terminated",
        "terminated",
        "terminated",
    ]
    scaled_up = d.events("gpu", limit=100)[-2]["detail"]
    assert scaled_up["direction"] == "up" and "activation" in scaled_up["reason"]


def test_surge_bounds_one_tick(d: Dispatch, fake: FakeProvider) -> None:
    d.create_queue("wide", elasticity={"kind": "elastic", "max": 100, "provider": "sim"})
    submit(d, "wide", 40)
    c = controller(d, fake, Clock())
    assert c.tick()[0].launch == 5  # MIN_SURGE from zero
    assert c.tick()[0].launch == 5  # booting instances count: at most current * speed


def test_only_idle_workers_are_drained(d: Dispatch, fake: FakeProvider) -> None:
    clock = Clock()
    d.create_queue("q", elasticity={"kind": "elastic", "max": 3, "provider": "sim"})
    submit(d, "q", 3)
    c = controller(d, fake, clock)
    c.tick()
    names = fake.register_all(d.store)
    # one job stays running on the first daemon; the others finish
    busy = claiming.claim(d, ["q"], worker=names[0])
    assert busy is not None
    drain_jobs(d, ["q"])

    clock.now += 1
    decision = c.tick()
    assert decision[0].desired == 1 and decision[0].drain == 2
    states = {w.name: w.state for w in d.workers()}
    assert states[names[0]] == "alive"
    assert sorted(s for n, s in states.items() if n != names[0]) == ["draining", "draining"]


def test_stabilisation_window_delays_scale_down(d: Dispatch, fake: FakeProvider) -> None:
    clock = Clock()
    d.create_queue("q", elasticity={"kind": "elastic", "max": 2, "provider": "sim"})
    submit(d, "q", 2)
    c = controller(d, fake, clock, scale_down_window_s=60.0)
    c.tick()
    fake.register_all(d.store)
    drain_jobs(d, ["q"])
    for _ in range(5):
        clock.now += 10
        assert c.tick()[0].drain == 0  # within the window: hold
    clock.now += 61
    assert c.tick()[0].drain == 2


def test_an_instance_without_a_heartbeat_after_boot_timeout_is_an_orphan(
    d: Dispatch, fake: FakeProvider
) -> None:
    clock = Clock()
    d.create_queue("q", elasticity={"kind": "fixed", "max": 1, "provider": "sim"})
    c = controller(d, fake, clock)
    assert c.tick()[0].launch == 1
    clock.now += 61  # never registered
    fake.age(61)
    decision = c.tick()[0]
    assert decision.terminate == 1 and decision.launch == 1  # replaced in the same tick
    orphan = next(e for e in d.events("q") if e["kind"] == "terminated")
    assert "orphan" in orphan["detail"]["reason"]


def test_a_restarted_controller_knows_its_fleet_by_tags(d: Dispatch, fake: FakeProvider) -> None:
    d.create_queue("q", elasticity={"kind": "fixed", "max": 2, "provider": "sim"})
    clock = Clock()
    controller(d, fake, clock).tick()
    fake.register_all(d.store)
    again = controller(d, fake, clock).tick()[0]
    assert (again.current, again.launch) == (2, 0)


def test_pool_is_sized_on_summed_demand_and_workers_carry_every_member(
    d: Dispatch, fake: FakeProvider
) -> None:
    pool = {"kind": "fully_elastic", "max": 6, "pool": "mixed", "provider": "sim"}
    pool["match"] = {"instance_type": "c7i"}
    d.create_queue("prep", elasticity=pool)
    d.create_queue("eval", elasticity={**pool, "steal_delay_s": 5})
    submit(d, "prep", 1)
    submit(d, "eval", 3)
    [decision] = controller(d, fake, Clock()).tick()
    assert decision.target == "pool/mixed" and decision.desired == 4
    specs = [c.spec for c in fake.calls if c.spec is not None]
    assert {s.queues for s in specs} == {("eval", "prep"), ("prep", "eval")}
    primaries = sorted(s.queues[0] for s in specs for _ in s.names)
    assert primaries == ["eval", "eval", "eval", "prep"]  # where the demand is
    assert all(s.settings["instance_type"] == "c7i" for s in specs)  # match over the config
    assert d.events("prep")[0]["kind"] == "scaled" and d.events("eval")[0]["kind"] == "scaled"


def test_global_cap_serves_the_cheapest_pool_first(d: Dispatch, fake: FakeProvider) -> None:
    d.create_queue(
        "cheap", elasticity={"kind": "elastic", "max": 4, "provider": "sim", "cost_weight": 1}
    )
    d.create_queue(
        "dear", elasticity={"kind": "elastic", "max": 4, "provider": "sim", "cost_weight": 5}
    )
    submit(d, "cheap", 4)
    submit(d, "dear", 4)
    decisions = {x.target: x for x in controller(d, fake, Clock(), max_workers=5).tick()}
    assert decisions["queue/cheap"].launch == 4
    assert decisions["queue/dear"].launch == 1
    assert "global cap" in decisions["queue/dear"].reason


def test_a_missing_provider_is_one_error_event_not_one_per_tick(
    d: Dispatch, fake: FakeProvider
) -> None:
    d.create_queue("q", elasticity={"kind": "fixed", "max": 1, "provider": "nowhere"})
    c = controller(d, fake, Clock())
    for _ in range(3):
        c.tick()
    errors = [e for e in d.events("q") if e["kind"] == "scale_error"]
    assert len(errors) == 1 and "no provider config named 'nowhere'" in errors[0]["detail"]["error"]
    assert fake.launched() == 0


def test_none_is_never_touched(d: Dispatch, fake: FakeProvider) -> None:
    d.create_queue("mine", elasticity={"kind": "none"})
    submit(d, "mine", 10)
    assert controller(d, fake, Clock()).tick() == []
    assert fake.calls == []


def test_instances_of_a_deleted_queue_are_drained(d: Dispatch, fake: FakeProvider) -> None:
    clock = Clock()
    d.create_queue("old", elasticity={"kind": "fixed", "max": 1, "provider": "sim"})
    c = controller(d, fake, clock)
    c.tick()
    fake.register_all(d.store)
    d.delete_queue("old", force=True)
    clock.now += 1
    [decision] = c.tick()
    assert decision.desired == 0 and decision.drain == 1


def test_two_controllers_never_both_act(tmp_path: Path, fake: FakeProvider) -> None:
    """Both loops run at once on one SQLite file; only the lock holder ever launches."""
    db = tmp_path / "lakeshore.db"
    plane = Dispatch(db)
    plane.store.add_provider("default", "sim", "fake", {})
    plane.create_queue("q", elasticity={"kind": "fixed", "max": 2, "provider": "sim"})
    acted: dict[str, int] = {}

    class Counting(Controller):
        def tick(self):  # type: ignore[no-untyped-def]
            acted[self.label] = acted.get(self.label, 0) + 1
            return super().tick()

    leaders = [FileLeader(db, "controller"), FileLeader(db, "controller")]
    stops = [threading.Event(), threading.Event()]
    threads = []
    for i in range(2):
        c = Counting(plane.store, Settings(interval_s=0.01), provider_factory=lambda _: fake)
        c.label = f"c{i}"  # type: ignore[attr-defined]
        t = threading.Thread(target=c.run, args=(stops[i], leaders[i]), daemon=True)
        threads.append(t)
        t.start()
    try:
        deadline = threading.Event()
        while sum(acted.values()) < 20 and not deadline.wait(0.01):
            pass
        assert list(acted) == ["c0"]  # the first to lock; the standby never ticked
        assert fake.launched() == 2

        # the leader stops and lets go: the standby takes over
        stops[0].set()
        threads[0].join(5)
        leaders[0].close()
        while "c1" not in acted and not deadline.wait(0.01):
            pass
        assert "c1" in acted
    finally:
        for s in stops:
            s.set()
        for t in threads:
            t.join(5)
        for leader in leaders:
            leader.close()
        plane.close()


def test_instances_launched_with_an_older_config_are_rolled_one_at_a_time(
    d: Dispatch, fake: FakeProvider
) -> None:
    clock = Clock()
    policy = {"kind": "fixed", "max": 2, "provider": "sim"}
    d.create_queue("roll", elasticity=policy)
    c = controller(d, fake, clock)
    assert c.tick()[0].launch == 2
    fake.register_all(d.store)
    clock.now += 1
    assert c.tick()[0].drain == 0  # up to date: nothing to roll

    # The launch config changes (a bigger instance type for this queue).
    d.replace_elasticity("roll", {**policy, "match": {"instance_type": "large"}})
    clock.now += 1
    decision = c.tick()[0]

    assert decision.drain == 1 and "rolling" in decision.reason
    assert sorted(w.state for w in d.workers()) == ["alive", "draining"]
    # The drained daemon leaves; its replacement is launched with the new config.
    for w in d.workers():
        if w.state == "draining":
            d.set_worker_state(w.id, "gone")
    clock.now += 1
    decision = c.tick()[0]
    assert (decision.terminate, decision.launch) == (1, 1)
    specs = {i.tags["lakeshore:spec"] for i in fake.list()}
    assert len(specs) == 2  # one old, one new: the next tick rolls the other
    fake.register_all(d.store)
    clock.now += 1
    assert c.tick()[0].drain == 1
