"""The controller launches a gang's daemons together (issue 47, item 1): a job of `nodes=N`
needs N daemons at once, each running one part, so its demand is N daemons (packed onto the
launch shape one part per daemon, or counted part by part without a shape), and one tick
launches all N rather than a surge's worth. On the in-memory plane and the fake provider."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from dreamlake.lakeshore.controller.loop import Controller, Settings
from dreamlake.lakeshore.controller.observe import observe
from dreamlake.lakeshore.controller.packing import Demand, pack
from dreamlake.lakeshore.controller.policy import Policy, desired_workers
from dreamlake.lakeshore.plane import Dispatch
from dreamlake.lakeshore.providers.fake import FakeProvider
from dreamlake.lakeshore.shapes import Shape
from dreamlake.lakeshore.types import SubmitRequest
from tests.support import claiming
from tests.support.postgres import postgres_schema

H100X8 = Shape(gpus=8, gpu_type="H100", gpu_memory_gb=80)


def test_a_gangs_parts_go_each_onto_a_daemon_of_its_own() -> None:
    # four 1-GPU parts would fit one 8-GPU box; one per daemon, they need four
    assert pack([Demand({"gpus": 1}, 1, nodes=4)], H100X8, slots=8).daemons == 4
    # two gangs of two share two daemons (parts of different gangs may share one)
    assert pack([Demand({"gpus": 4}, 2, nodes=2)], H100X8, slots=8).daemons == 2
    # whole-box parts: one daemon per part, plus single jobs fill the rest first-fit
    got = pack([Demand({"gpus": 8}, 1, nodes=3), Demand({"gpus": 2}, 4)], H100X8, slots=8)
    assert (got.daemons, got.jobs, got.gpus) == (4, 5, 32.0)


def test_a_gang_wider_than_the_limit_is_capped() -> None:
    got = pack([Demand({"gpus": 8}, 1, nodes=6)], H100X8, slots=8, limit=4)
    assert (got.daemons, got.capped) == (4, True)
    # a million queued gangs cost the limit's worth of placing, not a million's
    got = pack([Demand({"gpus": 8}, 1_000_000, nodes=2)], H100X8, slots=8, limit=5)
    assert (got.daemons, got.jobs, got.capped) == (5, 1_000_000, True)


def test_without_a_shape_a_gang_needs_as_many_daemons_as_parts() -> None:
    policy = Policy(kind="elastic", max=10, target_per_worker=4)
    # one 3-node job alone: 1 / 4 rounds to one daemon, which could never run it
    assert desired_workers(policy, 3, 0, 0.0, gang=3)[0] == 3
    assert "a gang of 3 parts needs 3 daemons" in desired_workers(policy, 3, 0, 0.0, gang=3)[1]
    assert desired_workers(policy, 0, 0, 0.0, gang=3)[0] == 0  # no demand, nothing


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "postgres"])
def d(request: pytest.FixtureRequest) -> Iterator[Dispatch]:
    with contextlib.ExitStack() as stack:
        url = ":memory:"
        if request.param == "postgres":
            url = stack.enter_context(postgres_schema("lakeshore_ctl_gangs"))
        plane = Dispatch(url)
        stack.callback(plane.close)
        plane.store.add_provider("default", "gpu8", "fake", {"shape": {"gpus": 8}})
        plane.store.add_provider("default", "plain", "fake", {})
        yield plane


def controller(d: Dispatch, fake: FakeProvider, clock: Clock) -> Controller:
    fake.clock = clock
    settings = Settings(scale_down_window_s=0.0, boot_timeout_s=60.0)
    return Controller(d.store, settings, provider_factory=lambda _: fake, clock=clock)


def submit(d: Dispatch, queue: str, n: int, *, nodes: int = 1, **resources: Any) -> list[str]:
    return d.submit(
        queue,
        [SubmitRequest(payload=b"x", resources=resources or None, nodes=nodes) for _ in range(n)],
    )


def test_the_plane_reports_a_gang_as_one_demand_of_n_parts(d: Dispatch) -> None:
    d.create_queue("train")
    submit(d, "train", 1, nodes=4, gpus=2)
    submit(d, "train", 3, gpus=2)  # the same request, single-box
    submit(d, "train", 1, nodes=2)  # a gang stating no request
    submit(d, "train", 5)
    got = sorted(
        (sorted(r.request.items()), r.count, r.nodes)
        for r in observe(d.store).requests[("default", "train")]
    )
    assert got == [([], 1, 2), ([], 5, 1), ([("gpus", 2)], 1, 4), ([("gpus", 2)], 3, 1)]


@pytest.mark.parametrize(("provider", "resources"), [("gpu8", {"gpus": 1}), ("plain", {})])
def test_one_tick_launches_a_gangs_daemons_together(
    d: Dispatch, provider: str, resources: dict[str, Any]
) -> None:
    """Eight 1-GPU parts: one 8-GPU launch would hold them all, but each part needs a daemon
    of its own; the tick launches all eight at once, past the surge of five a tick."""
    fake, clock = FakeProvider(provider), Clock()
    d.create_queue("train", elasticity={"kind": "fully_elastic", "max": 10, "provider": provider})
    submit(d, "train", 1, nodes=8, **resources)
    [decision] = controller(d, fake, clock).tick()
    assert (decision.desired, decision.launch, fake.launched()) == (8, 8, 8)


def test_every_daemon_running_a_part_of_a_started_gang_is_busy(d: Dispatch) -> None:
    """A gang's row names rank 0's worker; rank 1's daemon must not look idle (the controller
    drains idle daemons first)."""
    d.create_queue("train")
    submit(d, "train", 1, nodes=2)
    parts = [claiming.claim(d, ["train"], worker=w) for w in ("w1", "w2")]
    assert all(p is not None for p in parts)
    running = {r["worker"]: int(r["n"]) for r in d.store.fleet_view()["running"]}
    assert running == {"w1": 1, "w2": 1}
