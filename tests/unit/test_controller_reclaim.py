"""Lost capacity (issue 35 item 4): reclaimed instances are replaced at once, counted per target,
and past `spot_fallback_after` within an hour the target's launches go on-demand.

On the in-memory plane and the recording fake provider; the test plays the cloud
(`FakeProvider.reclaim`) and the daemons (worker rows), and moves a clock; nothing sleeps.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dreamlake.lakeshore.controller.loop import Controller, Settings
from dreamlake.lakeshore.plane import Dispatch
from dreamlake.lakeshore.providers.fake import FakeProvider


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def d() -> Iterator[Dispatch]:
    plane = Dispatch(":memory:")
    plane.store.add_provider("default", "sim", "fake", {"spot": True, "spot_fallback_after": 2})
    plane.create_queue("train", elasticity={"kind": "fixed", "max": 2, "provider": "sim"})
    yield plane
    plane.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def fake(clock: Clock) -> FakeProvider:
    return FakeProvider("sim", clock=clock)


@pytest.fixture
def c(d: Dispatch, fake: FakeProvider, clock: Clock) -> Controller:
    settings = Settings(scale_down_window_s=0.0, boot_timeout_s=60.0, reclaim_grace_s=120.0)
    return Controller(d.store, settings, provider_factory=lambda _: fake, clock=clock)


def events(d: Dispatch, kind: str) -> list[dict[str, Any]]:
    return [e["detail"] for e in reversed(d.events("train", limit=200)) if e["kind"] == kind]


def on_demand_launches(fake: FakeProvider) -> list[bool]:
    return [c.spec.on_demand for c in fake.calls if c.spec is not None for _ in c.ids]


def serve(d: Dispatch, fake: FakeProvider, c: Controller, clock: Clock) -> list[str]:
    """The fleet launched, its daemons registered and seen serving by one tick."""
    clock.now += 1
    c.tick()
    fake.register_all(d.store)
    clock.now += 1
    c.tick()
    return sorted(fake.instances)


def test_a_reclaimed_instance_is_replaced_on_the_next_tick_and_recorded_once(
    d: Dispatch, fake: FakeProvider, c: Controller, clock: Clock
) -> None:
    first, _ = serve(d, fake, c, clock)

    fake.reclaim([first], "terminated: Server.SpotInstanceTermination")
    clock.now += 1
    [decision] = c.tick()

    assert (decision.current, decision.launch) == (1, 1)
    [reclaimed] = events(d, "reclaimed")
    assert reclaimed["instance"] == first
    assert reclaimed["why"] == "terminated: Server.SpotInstanceTermination"
    assert first in fake.terminated()  # what the cloud still holds of it is ended
    clock.now += 1
    c.tick()
    assert len(events(d, "reclaimed")) == 1
    assert on_demand_launches(fake) == [False, False, False]  # one reclaim: still spot


def test_past_spot_fallback_after_within_an_hour_launches_go_on_demand_then_back_to_spot(
    d: Dispatch, fake: FakeProvider, c: Controller, clock: Clock
) -> None:
    first, second = serve(d, fake, c, clock)

    fake.reclaim([first, second])
    clock.now += 1
    c.tick()

    assert on_demand_launches(fake) == [False, False, True, True]
    [fallback] = events(d, "spot_fallback")
    assert (fallback["market"], fallback["reclaims"], fallback["spot_fallback_after"]) == (
        "on-demand",
        2,
        2,
    )
    assert "launching on-demand" in fallback["why"]

    # An hour on, the reclaims have aged out: a new launch goes to spot again, and says so.
    fake.register_all(d.store)
    clock.now += 3601
    c.tick()
    third = sorted(fake.instances)[0]
    fake.reclaim([third])
    clock.now += 1
    c.tick()
    assert on_demand_launches(fake)[-1] is False
    assert [f["market"] for f in events(d, "spot_fallback")] == ["on-demand", "spot"]


def test_an_on_demand_launch_is_not_rolled_as_outdated(
    d: Dispatch, fake: FakeProvider, c: Controller, clock: Clock
) -> None:
    fake.reclaim(serve(d, fake, c, clock))
    clock.now += 1
    c.tick()
    fake.register_all(d.store)
    clock.now += 1
    [decision] = c.tick()
    assert (decision.current, decision.drain, decision.launch) == (2, 0, 0)


def test_without_spot_reclaims_are_replaced_but_never_switch_the_market(
    d: Dispatch, fake: FakeProvider, c: Controller, clock: Clock
) -> None:
    d.delete_provider("sim")
    d.add_provider("sim", "fake", {"spot_fallback_after": 1})
    fake.reclaim(serve(d, fake, c, clock))
    clock.now += 1
    assert c.tick()[0].launch == 2
    assert not any(on_demand_launches(fake)) and events(d, "spot_fallback") == []


def test_a_daemon_that_left_on_its_own_is_replaced_at_once_and_its_box_waits_for_the_reclaim(
    d: Dispatch, fake: FakeProvider, c: Controller, clock: Clock
) -> None:
    first, second = serve(d, fake, c, clock)
    rows = {w.name: w for w in d.workers()}

    # The box is going away (a spot notice): both daemons drain on their own and leave.
    for inst_id in (first, second):
        d.set_worker_state(rows[fake.instances[inst_id].daemon].id, "gone")
    clock.now += 1
    [decision] = c.tick()
    assert (decision.current, decision.launch, decision.terminate) == (0, 2, 0)

    # EC2 ends one at the notice's deadline: a reclaim, not the controller's termination.
    fake.reclaim([first])
    clock.now += 60
    c.tick()
    assert [e["instance"] for e in events(d, "reclaimed")] == [first]
    assert second not in fake.terminated()

    # The other is never reclaimed: after the grace the controller ends it itself.
    clock.now += 61
    c.tick()
    assert second in fake.terminated()
    [ended] = [e for e in events(d, "terminated") if e["instance"] == second]
    assert "left on its own" in ended["reason"]
