"""The controller sizes fleets in GPUs, not jobs (issue 34, item 5): requests packed onto the
provider's launch shape, first-fit decreasing; then ticks on the in-memory plane and the fake
provider, with the test playing the daemons."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dreamlake.lakeshore.controller.loop import Controller, Settings
from dreamlake.lakeshore.controller.packing import Demand, pack
from dreamlake.lakeshore.plane import Dispatch
from dreamlake.lakeshore.providers.fake import FakeProvider
from dreamlake.lakeshore.shapes import Shape
from dreamlake.lakeshore.types import SubmitRequest

H100X8 = Shape(gpus=8, gpu_type="H100", gpu_memory_gb=80)


def demands(*groups: tuple[dict[str, Any], int]) -> list[Demand]:
    return [Demand(r, n) for r, n in groups]


def test_first_fit_decreasing_packs_gpu_requests_onto_the_shape() -> None:
    # 1x8 + 3x4 + 6x1 + 4x0.5: 8 | 4+4 | 4+1+1+1+1 | 1+1+0.5x4 (fractions share two GPUs)
    got = pack(
        demands(({"gpus": 1}, 6), ({"gpus": 4}, 3), ({"gpus": 8}, 1), ({"gpus": 0.5}, 4)),
        H100X8,
        slots=8,
    )
    assert (got.daemons, got.jobs, got.unfit, got.gpus) == (4, 14, 0, 28.0)


def test_fractions_pack_onto_as_few_gpus_as_fit() -> None:
    # three 0.4 shares do not fit one GPU: two per GPU, so 8 of them take 4 GPUs of one box
    assert pack(demands(({"gpus": 0.4}, 8)), H100X8, slots=16).daemons == 1
    assert pack(demands(({"gpus": 0.4}, 17)), H100X8, slots=32).daemons == 2


def test_slots_cpus_and_memory_bound_a_daemon_too() -> None:
    assert pack(demands(({}, 10)), H100X8, slots=8).daemons == 2  # 0-GPU jobs take slots
    box = Shape(gpus=8, cpus=32, memory_gb=256)
    assert pack(demands(({"gpus": 1, "cpus": 16}, 4)), box, slots=8).daemons == 2
    assert pack(demands(({"gpus": 1, "memory_gb": 100}, 4)), box, slots=8).daemons == 2


def test_jobs_no_shape_could_run_are_not_demand() -> None:
    got = pack(
        demands(({"gpus": 16}, 5), ({"gpus": 1, "gpu_type": "A100"}, 2), ({"gpus": 2}, 1)),
        H100X8,
        slots=8,
    )
    assert (got.daemons, got.jobs, got.unfit) == (1, 1, 7)
    assert "7 job(s) no such daemon could run left out" in got.words(H100X8)


def test_packing_stops_at_the_limit() -> None:
    got = pack(demands(({"gpus": 8}, 1_000_000)), H100X8, slots=8, limit=5)
    assert (got.daemons, got.jobs, got.capped) == (5, 1_000_000, True)


# -- the controller on the in-memory plane ------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def d() -> Iterator[Dispatch]:
    plane = Dispatch(":memory:")
    plane.store.add_provider(
        "default", "gpu8", "fake", {"shape": {"gpus": 8, "gpu_type": "H100", "gpu_memory_gb": 80}}
    )
    yield plane
    plane.close()


def controller(d: Dispatch, fake: FakeProvider, clock: Clock) -> Controller:
    fake.clock = clock
    settings = Settings(scale_down_window_s=0.0, boot_timeout_s=60.0)
    return Controller(d.store, settings, provider_factory=lambda _: fake, clock=clock)


def submit(d: Dispatch, queue: str, n: int, **resources: Any) -> list[str]:
    return d.submit(queue, [SubmitRequest(payload=b"x", resources=resources) for _ in range(n)])


def test_the_controller_launches_daemons_for_packed_gpus_not_jobs(d: Dispatch) -> None:
    fake, clock = FakeProvider("gpu8"), Clock()
    d.create_queue("train", elasticity={"kind": "elastic", "min": 0, "max": 10, "provider": "gpu8"})
    submit(d, "train", 6, gpus=4)  # 24 GPUs: three 8-GPU daemons, not six
    submit(d, "train", 3, gpus=16)  # no shape runs these: not demand
    [decision] = controller(d, fake, clock).tick()
    assert (decision.desired, decision.launch, fake.launched()) == (3, 3, 3)
    assert "6 job(s) asking 24 GPU(s) packed onto 8 x H100 (80 GB) -> 3 daemon(s)" in (
        decision.reason
    )
    assert "3 job(s) no such daemon could run left out" in decision.reason
    [event] = [e for e in d.events("train", limit=10) if e["kind"] == "scaled"]
    assert event["detail"]["shape"] == {"gpus": 8, "gpu_type": "H100", "gpu_memory_gb": 80}


def test_only_unrunnable_jobs_launch_nothing(d: Dispatch) -> None:
    fake, clock = FakeProvider("gpu8"), Clock()
    d.create_queue("big", elasticity={"kind": "fully_elastic", "max": 4, "provider": "gpu8"})
    submit(d, "big", 2, gpus=16)
    submit(d, "big", 1, gpus=1, gpu_type="A100")
    [decision] = controller(d, fake, clock).tick()
    assert (decision.desired, fake.launched()) == (0, 0)


def test_a_pool_packs_its_queues_together_within_max(d: Dispatch) -> None:
    fake, clock = FakeProvider("gpu8"), Clock()
    policy = {"kind": "elastic", "max": 2, "provider": "gpu8", "pool": "h100"}
    d.create_queue("evals", elasticity=policy)
    d.create_queue("train", elasticity=policy)
    submit(d, "evals", 8, gpus=1)  # one daemon's worth
    submit(d, "train", 2, gpus=8)  # two more: capped at max 2
    [decision] = controller(d, fake, clock).tick()
    assert (decision.desired, fake.launched()) == (2, 2)
    assert "10 job(s) asking 24 GPU(s) packed onto 8 x H100 (80 GB) -> 2+ daemon(s)" in (
        decision.reason
    )


def test_without_a_shape_the_job_count_sizes_the_fleet_as_before(d: Dispatch) -> None:
    fake, clock = FakeProvider("plain"), Clock()
    d.store.add_provider("default", "plain", "fake", {})
    d.create_queue("cpu", elasticity={"kind": "elastic", "max": 10, "provider": "plain"})
    submit(d, "cpu", 4, gpus=4)
    [decision] = controller(d, fake, clock).tick()
    assert (decision.desired, fake.launched()) == (4, 4)
    assert "demand 4 / target 1 -> 4" in decision.reason


def test_a_job_stating_no_gpus_takes_the_daemons_gpus_per_job() -> None:
    """A Slurm config of 2 GPUs whose daemons run `--gpus-per-job 2`: two plain jobs that must
    run at once need two daemons, not one daemon's two slots."""
    from dreamlake.lakeshore.shapes import launch_shape

    shape = launch_shape("slurm", {"gpus": 2, "gpu_type": "h100", "args": ["--gpus-per-job", "2"]})
    assert shape is not None and shape.default_gpus == 2
    assert pack(demands(({}, 2)), shape, slots=shape.slots()).daemons == 2
    assert pack(demands(({"gpus": 1}, 2)), shape, slots=shape.slots()).daemons == 1
    one_string = launch_shape("local", {"shape": {"gpus": 8}, "args": "--gpus-per-job=4"})
    assert one_string is not None and one_string.default_gpus == 4
