"""Host facts, GPU discovery and slot pinning, the daemon's default name."""

from __future__ import annotations

import pytest

from dreamlake.lakeshore.daemon.inventory import (
    Gpu,
    LoadMeter,
    check_gpu_plan,
    host_facts,
    parse_nvidia_smi,
    restrict,
    slot_gpus,
)
from dreamlake.lakeshore.daemon.main import default_name
from dreamlake.lakeshore.types import NAME_PATTERN

SMI = """\
0, GPU-aaaa, NVIDIA H100 80GB HBM3, 81559 MiB
1, GPU-bbbb, NVIDIA H100 80GB HBM3, 81559 MiB
2, GPU-cccc, NVIDIA A10G, 23028
3, GPU-dddd, Tesla V100-SXM2-16GB, 16384 MiB
"""


def gpus(n: int = 4) -> list[Gpu]:
    return parse_nvidia_smi(SMI)[:n]


def test_nvidia_smi_csv_with_and_without_units() -> None:
    parsed = parse_nvidia_smi(SMI + "\nNo devices were found\n")
    assert [g.index for g in parsed] == [0, 1, 2, 3]
    assert parsed[0] == Gpu(0, "GPU-aaaa", "NVIDIA H100 80GB HBM3", 81559)
    assert parsed[2].memory_mb == 23028


def test_slot_i_gets_gpus_i_times_k_onwards() -> None:
    inventory = gpus()
    assert [g.index for g in slot_gpus(inventory, 0, 2)] == [0, 1]
    assert [g.index for g in slot_gpus(inventory, 1, 2)] == [2, 3]
    assert slot_gpus(inventory, 1, 0) == []


def test_a_plan_that_needs_more_gpus_than_the_box_has_is_refused() -> None:
    assert check_gpu_plan(gpus(), 2, 2) is None
    assert check_gpu_plan([], 4, 0) is None
    problem = check_gpu_plan(gpus(2), 2, 2)
    assert problem is not None and "needs 4 GPU(s)" in problem


def test_cuda_visible_devices_of_the_daemon_restricts_its_inventory() -> None:
    inventory = gpus()
    assert [g.index for g in restrict(inventory, "3,1")] == [3, 1]
    assert [g.index for g in restrict(inventory, "GPU-cccc")] == [2]
    assert restrict(inventory, "") == []
    assert restrict(inventory, None) == inventory


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("gpu-box-7", "gpu-box-7-42"),
        ("ip-10-0-0-1.ec2.internal", "ip-10-0-0-1-42"),
        ("My_Laptop", "my-laptop-42"),
        ("--", "worker-42"),
    ],
)
def test_default_name_is_a_valid_worker_name(host: str, expected: str) -> None:
    name = default_name(host, 42)
    assert name == expected
    assert NAME_PATTERN.match(name)


def test_host_facts_and_load_figures() -> None:
    facts = host_facts(concurrency=2, gpus=gpus(2), labels={"zone": "a"}, gpus_per_job=1)
    assert facts["cpus"] >= 1 and facts["memory_mb"] > 0
    assert [g["uuid"] for g in facts["gpus"]] == ["GPU-aaaa", "GPU-bbbb"]
    load = LoadMeter().measure([{"state": "busy"}, {"state": "idle"}])
    assert load["busy"] == 1 and load["idle"] == 1
    assert 0 <= load["memory_percent"] <= 100 and load["rss_mb"] > 0
