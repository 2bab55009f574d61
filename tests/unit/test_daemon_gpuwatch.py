"""The GPU watcher's judgements (daemon/gpuwatch.py): a job's memory against its share, the seam's
readings, a failed GPU out of the placer's offer. tests/e2e/test_daemon_causes.py runs them on a
real daemon with real children; NVML itself needs a GPU and is not exercised here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dreamlake.lakeshore.daemon.gpuwatch import (
    FileReader,
    GpuProcess,
    Reading,
    family,
    job_use,
    open_reader,
    over_share,
)
from dreamlake.lakeshore.daemon.inventory import Gpu
from dreamlake.lakeshore.daemon.placement import Placer

H100 = [Gpu(i, f"GPU-{i}", "NVIDIA H100 80GB HBM3", 80 * 1024) for i in range(2)]
BY_INDEX = {g.index: g for g in H100}


def test_a_job_over_its_share_on_a_gpu_it_holds_is_named_with_the_figures() -> None:
    (over,) = over_share({0: 60 * 1024}, {0: 0.25}, BY_INDEX)
    assert (over.index, over.used_mb, over.allowed_mb) == (0, 60 * 1024, 20 * 1024)
    assert over.words(H100[0], 0.25) == (
        "used 60.0 GB of GPU 0's memory (NVIDIA H100 80GB HBM3), more than its share of "
        "20.0 GB (gpus=0.25 x 80 GB); ended by --enforce-gpu-memory"
    )


@pytest.mark.parametrize(
    ("used", "held", "over"),
    [
        ({0: 20 * 1024}, {0: 0.25}, []),  # exactly its share
        ({0: 79 * 1024, 1: 10}, {0: 1.0, 1: 1.0}, []),  # a whole-GPU job on its own GPUs
        ({1: 1.0}, {0: 0.5}, [1]),  # any use of a GPU it was not given
        ({}, {0: 0.5}, []),
    ],
)
def test_only_use_past_the_share_is_over(
    used: dict[int, float], held: dict[int, float], over: list[int]
) -> None:
    assert [o.index for o in over_share(used, held, BY_INDEX)] == over


def test_a_gpu_of_unknown_memory_is_not_judged() -> None:
    declared = {0: Gpu(0, "declared-0", "declared GPU", 0)}
    assert over_share({0: 10**6}, {0: 0.5}, declared) == []


def test_a_jobs_use_is_its_process_and_descendants_summed_per_gpu() -> None:
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        mine = family(os.getpid())
        assert helper.pid in mine and os.getpid() in mine
        reading = Reading(
            processes={
                0: [GpuProcess(os.getpid(), 100), GpuProcess(helper.pid, 50), GpuProcess(1, 999)],
                1: [GpuProcess(1, 5)],
            }
        )
        assert job_use(mine, reading) == {0: 150}
    finally:
        helper.kill()
        helper.wait()


def test_the_seam_reads_its_file_each_time(tmp_path: Path) -> None:
    path = tmp_path / "gpus.json"
    reader = open_reader({"LAKESHORE_GPU_STATE": str(path)})
    assert isinstance(reader, FileReader)
    assert reader.read([0, 1]) == Reading()  # no file yet: nothing to report
    state = {"processes": {"1": [{"pid": 7, "used_mb": 3}]}, "failed": {"0": "Xid 79"}}
    path.write_text(json.dumps(state))
    reading = reader.read([0, 1])
    assert reading.processes == {1: [GpuProcess(7, 3.0)]} and reading.failed == {0: "Xid 79"}


def test_a_failed_gpu_leaves_the_offer_and_takes_no_job() -> None:
    placer = Placer(H100)
    placer.fail(1)

    free = placer.free()
    assert (free["gpus_whole"], free["box"]["gpus_whole"]) == (1, 1)
    assert placer.place("two", {"gpus": 2}) is None
    one = placer.place("one", {"gpus": 1})
    assert one is not None and one.indexes == [0]
    assert placer.place("half", {"gpus": 0.5}) is None  # GPU 0 is whole-held, 1 failed
    assert placer.in_use() == {"total": 2, "used": 1.0, "free": 0.0, "failed": 1}
