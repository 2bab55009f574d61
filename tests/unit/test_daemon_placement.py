"""The daemon's placer (issue 34): which GPUs each job gets, and what a claim says is free."""

from __future__ import annotations

from dreamlake.lakeshore.daemon.inventory import Gpu
from dreamlake.lakeshore.daemon.placement import Placer, declared_gpus


def box(n: int = 4, name: str = "NVIDIA H100 80GB HBM3") -> Placer:
    return Placer(declared_gpus(n, name, 80.0), cpus=8, memory_gb=64)


def test_fractions_pack_onto_as_few_gpus_as_fit() -> None:
    placer = box()
    halves = [placer.place(f"h{i}", {"gpus": 0.5}) for i in range(2)]
    quarter = placer.place("q", {"gpus": 0.25})

    assert [p.indexes for p in halves if p] == [[0], [0]]
    assert quarter is not None and quarter.indexes == [1]
    assert placer.free()["gpus_whole"] == 2 and placer.free()["gpu_share"] == 1.0


def test_whole_gpus_come_from_unused_ones_and_go_back_when_the_job_ends() -> None:
    placer = box()
    assert placer.place("half", {"gpus": 0.5}) is not None
    three = placer.place("three", {"gpus": 3})
    assert three is not None and three.indexes == [1, 2, 3]
    assert placer.place("one", {"gpus": 1}) is None  # GPU 0 is shared, not whole
    assert placer.free() | {"gpu_names": [], "box": None} == {
        "gpus_whole": 0,
        "gpu_share": 0.5,
        "gpu_names": [],
        "gpu_memory_gb": 80.0,
        "default_gpus": 0.0,
        "cpus": 8.0,
        "memory_gb": 64.0,
        "box": None,
    }

    placer.release("three")
    placer.release("half")
    eight = placer.place("all", {"gpus": 4})
    assert eight is not None and eight.indexes == [0, 1, 2, 3]


def test_type_memory_cpus_and_the_default_request() -> None:
    gpus = [Gpu(0, "u0", "NVIDIA A100-SXM4-40GB", 40 * 1024), Gpu(1, "u1", "NVIDIA H100", 81920)]
    placer = Placer(gpus, cpus=4, default_gpus=1)

    typed = placer.place("t", {"gpus": 1, "gpu_type": ["h100", "a100"]})
    assert typed is not None and typed.indexes == [1] and typed.gpu_type == "h100"
    assert placer.place("big", {"gpus": 1, "gpu_memory_gb": 80}) is None  # only the H100 has 80
    assert placer.place("cpus", {"cpus": 5}) is None
    default = placer.place("d", {})  # states no gpus: --gpus-per-job 1
    assert default is not None and default.indexes == [0]
    assert placer.could_ever({"gpus": 2}) and not placer.could_ever({"gpus": 3})
    assert placer.holding()["t"].record("w") == {  # what the row records
        "worker": "w",
        "gpus": [{"index": 1, "uuid": "u1", "name": "NVIDIA H100", "share": 1.0}],
        "gpu_type": "h100",
    }


def test_the_box_says_when_running_jobs_surely_free_whole_gpus() -> None:
    placer = box()
    placer.place("long", {"gpus": 1}, deadline=200.0)
    placer.place("short", {"gpus": 2}, deadline=100.0)
    placer.place("forever", {"gpus": 0.5})  # no timeout: never counted as ending

    whole = placer.free()["box"]
    assert whole["gpus_whole"] == 4 and whole["gpu_share"] == 1.0
    assert whole["whole_free_at"] == [[100.0, 2.0], [200.0, 3.0]]


def test_declared_gpus_are_the_ones_the_daemon_was_given_to_see() -> None:
    """A daemon in a Slurm job (or a unit pinned with CUDA_VISIBLE_DEVICES=2,3) that declares
    `--gpus 2` offers GPUs 2 and 3: another daemon of the node holds 0 and 1."""
    from dreamlake.lakeshore.daemon.inventory import visible_gpus
    from dreamlake.lakeshore.daemon.placement import declared_gpus

    in_slurm = {"SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "2,3"}
    assert [g.index for g in declared_gpus(2, "H100", 80, visible_gpus(in_slurm))] == [2, 3]
    assert [g.index for g in declared_gpus(2, None, None, visible_gpus({}))] == [0, 1]
    assert [g.index for g in declared_gpus(2, None, None, "")] == [0, 1]
