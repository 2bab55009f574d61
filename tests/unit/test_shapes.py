"""Launch shapes (issue 34, item 5): what a provider config says each daemon offers, and the
pending-reason rules that tell a job a launch will run from one nothing ever will."""

from __future__ import annotations

from typing import Any

import pytest

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.plane.providers import check_provider
from dreamlake.lakeshore.plane.store import schedulable
from dreamlake.lakeshore.plane.store.schedulable import judge
from dreamlake.lakeshore.resources import gpu_type_pattern
from dreamlake.lakeshore.shapes import Shape, check_shape, default_slots, launch_shape

H100X8 = Shape(gpus=8, gpu_type="H100", gpu_memory_gb=80, cpus=96, memory_gb=1024)


@pytest.mark.parametrize(
    ("shape", "words"),
    [
        ([8], "shape must be an object"),
        ({"gpu": 8}, "unknown shape key(s) 'gpu'"),
        ({"gpus": 1.5}, "shape.gpus must be a whole number of GPUs"),
        ({"gpus": True}, "shape.gpus must be a whole number"),
        ({"gpus": -1}, "shape.gpus must be a whole number"),
        ({"gpus": 8, "gpu_type": ["H100"]}, "shape.gpu_type must be one GPU name"),
        ({"gpus": 8, "gpu_memory_gb": float("nan")}, "shape.gpu_memory_gb must be a number"),
        ({"gpus": 8, "cpus": "96"}, "shape.cpus must be a number above 0"),
        ({"gpu_type": "H100"}, "gpu_type and gpu_memory_gb need gpus of 1 or more"),
    ],
)
def test_a_bad_shape_is_refused_naming_the_key(shape: Any, words: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        check_shape(shape)
    assert words in str(err.value)


def test_a_provider_config_with_a_bad_shape_is_refused_by_the_plane() -> None:
    with pytest.raises(InvalidArgument, match=r"provider config shape\.gpus must be a whole"):
        check_provider("gpu8", "local", {"shape": {"gpus": 0.5}})
    good = check_provider("gpu8", "local", {"shape": {"gpus": 8, "gpu_type": "H100"}})
    assert good["shape"] == {"gpus": 8, "gpu_type": "H100"}


def test_ec2_instance_types_set_the_shape_and_the_config_overrides_it() -> None:
    p5 = launch_shape("ec2", {"instance_type": "p5.48xlarge"})
    assert p5 is not None and (p5.gpus, p5.gpu_type, p5.gpu_memory_gb) == (8, "H100", 80)
    p4d = launch_shape("ec2", {"instance_type": "p4d.24xlarge"})
    p4de = launch_shape("ec2", {"instance_type": "p4de.24xlarge"})
    assert p4d is not None and p4de is not None
    assert (p4d.gpu_memory_gb, p4de.gpu_memory_gb) == (40, 80)
    g5 = launch_shape("ec2", {"instance_type": "g5.12xlarge"})
    assert g5 is not None and (g5.gpus, g5.gpu_type, g5.cpus) == (4, "A10G", 48)
    assert launch_shape("ec2", {"instance_type": "t3.micro"}) is None
    held = launch_shape("ec2", {"instance_type": "p5.48xlarge", "shape": {"gpus": 4}})
    assert held is not None and (held.gpus, held.gpu_type) == (4, "H100")
    assert "overridden by config" in held.source
    # a queue's match picks another type per pool
    pool = launch_shape("ec2", {"instance_type": "g6.xlarge"}, {"instance_type": "g6e.48xlarge"})
    assert pool is not None and (pool.gpus, pool.gpu_type) == (8, "L40S")


def test_slurm_gres_sets_the_shape() -> None:
    shape = launch_shape("slurm", {"gres": "gpu:h100:4", "cpus_per_task": 32, "mem": "256G"})
    assert shape == Shape(4, "h100", None, 32.0, 256.0, source="gres gpu:h100:4")
    counted = launch_shape("slurm", {"gpus": 2, "gpu_type": "a100", "mem": "2048"})
    assert counted is not None and (counted.gpus, counted.gpu_type, counted.memory_gb) == (
        2,
        "a100",
        2.0,
    )
    assert launch_shape("slurm", {"partition": "cpu"}) is None
    assert launch_shape("local", {}) is None


@pytest.mark.parametrize(
    ("request_", "runs"),
    [
        ({}, True),
        ({"gpus": 0.5}, True),
        ({"gpus": 8, "gpu_type": "h100"}, True),
        ({"gpus": 4, "gpu_type": ["A100", "H100"]}, True),
        ({"gpus": 16}, False),
        ({"gpus": 1, "gpu_type": "A100"}, False),
        ({"gpus": 1, "gpu_memory_gb": 80}, True),
        ({"gpus": 1, "gpu_memory_gb": 141}, False),
        ({"cpus": 97}, False),
        ({"memory_gb": 2048}, False),
    ],
)
def test_what_a_shape_could_run(request_: dict[str, Any], runs: bool) -> None:
    assert H100X8.could_run(request_) is runs


def test_an_untyped_shape_runs_no_typed_request() -> None:
    assert not Shape(gpus=8).could_run({"gpus": 1, "gpu_type": "H100"})
    assert Shape(gpus=8).could_run({"gpus": 1})


def test_the_local_provider_declares_the_shape_to_its_daemons() -> None:
    assert H100X8.daemon_args() == [
        "--gpus",
        "8",
        "--gpu-type",
        "H100",
        "--gpu-memory-gb",
        "80",
        "--cpus",
        "96",
        "--memory-gb",
        "1024",
    ]
    # what its resources allow, bounded by its CPUs (issue 45); a concurrency setting caps it
    assert H100X8.slots() == 96 and H100X8.slots(2) == 2 and Shape().slots() == 1
    assert Shape(gpus=8).slots() == 8  # no CPUs stated: one per GPU


@pytest.mark.parametrize(
    ("gpus", "cpus", "slots"),
    [(0, None, 1), (4, None, 4), (1, 2.0, 2), (8, 4.0, 8), (0, 16.0, 16), (1, 0.5, 1)],
)
def test_default_slots_are_what_the_resources_allow_bounded_by_the_cpus(
    gpus: int, cpus: float | None, slots: int
) -> None:
    assert default_slots(gpus, cpus) == slots


def _row(**request: Any) -> dict[str, Any]:
    """A queued_shapes row of one request, as the sweep reads it."""
    import json

    columns = {k: request.get(k) for k in ("gpus", "gpu_memory_gb", "cpus", "memory_gb")}
    return {**columns, "gpu_type": gpu_type_pattern(request), "sample": json.dumps(request)}


def _box(gpus: int) -> dict[str, Any]:
    return {
        "name": "box",
        "gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory_mb": 81920} for _ in range(gpus)],
        "gpus_per_job": 0,
        "resources": {"gpus": gpus, "cpus": None, "memory_gb": None},
    }


def test_the_reason_rules() -> None:
    gpu8 = ("gpu8", H100X8)
    # a shape could run it and no daemon is up: waiting, naming the shape to be launched
    assert judge(_row(gpus=4), [], "train", gpu8) == (
        "waiting_for_capacity",
        "needs 4 GPUs; no live daemon can run it: provider gpu8 will launch a daemon with "
        "8 x H100 (80 GB), 96 CPUs, 1024 GB",
    )
    # ... and with a smaller daemon up too
    assert judge(_row(gpus=4), [_box(1)], "train", gpu8)[0] == "waiting_for_capacity"
    # no daemon and no shape could: unschedulable, naming both
    assert judge(_row(gpus=16), [], "train", gpu8) == (
        "unschedulable",
        "needs 16 GPUs; no live daemon serves queue train and provider gpu8 launches daemons "
        "with 8 x H100 (80 GB), 96 CPUs, 1024 GB",
    )
    reason, words = judge(_row(gpus=16), [_box(2)], "train", gpu8)
    assert reason == "unschedulable" and words is not None
    assert "have at most 2 x NVIDIA H100 80GB HBM3" in words and "provider gpu8" in words
    # a live daemon could run it: no reason
    assert judge(_row(gpus=2), [_box(2)], "train", gpu8) == (None, None)
    # nothing to judge by (no daemon, no shape known): waiting, as before shapes
    assert judge(_row(gpus=16), [], "train", ("plain", None))[0] == "waiting_for_capacity"
    assert judge(_row(gpus=16), [], "train", None)[0] == "waiting_for_capacity"
    assert judge(_row(gpus=16), [_box(8)], "train", None)[0] == "unschedulable"


def test_the_pending_sweep_cadence_is_a_setting_and_a_bad_one_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for text, expected in [("", schedulable.EVERY_S), ("0.5", 0.5), ("30", 30.0)]:
        monkeypatch.setenv(schedulable.EVERY_ENV, text)
        schedulable.every_s.cache_clear()
        assert schedulable.every_s() == expected
    for bad in ["0", "-1", "soon", "inf", "nan"]:
        monkeypatch.setenv(schedulable.EVERY_ENV, bad)
        schedulable.every_s.cache_clear()
        with pytest.raises(InvalidArgument, match=f"LAKESHORE_PENDING_SWEEP_S is a number .*{bad}"):
            schedulable.every_s()
    monkeypatch.undo()
    schedulable.every_s.cache_clear()
