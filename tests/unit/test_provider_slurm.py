"""The slurm provider's pure parts: its config check, the batch script, reading squeue, and what
a daemon in a Slurm job makes of its environment. The real cluster is in
tests/e2e/test_provider_contract.py and tests/e2e/test_controller_slurm.py.
"""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path
from typing import Any

import pytest

from dreamlake.lakeshore.daemon.inventory import (
    parse_nvidia_smi,
    restrict,
    slurm_facts,
    visible_gpus,
)
from dreamlake.lakeshore.providers.base import LaunchSpec, ProviderError
from dreamlake.lakeshore.providers.slurm import SlurmProvider, parse_format, parse_json
from dreamlake.lakeshore.providers.slurmscript import check_config, render, token_path

TOKEN = "lks_not-in-the-script"


def spec(**kw: Any) -> LaunchSpec:
    base: dict[str, Any] = dict(
        namespace="research",
        queues=("train", "eval"),
        name="train",
        target="pool/gpu",
        plane_url="https://plane.example:8765",
        plane_token=TOKEN,
    )
    return LaunchSpec(**{**base, **kw})


def script(settings: dict[str, Any], tmp_path: Path, **kw: Any) -> str:
    return render(
        spec(**kw),
        "train-00",
        settings,
        provider="hpc",
        directory=tmp_path,
        token_file=str(tmp_path / "tokens" / "t"),
    )


# -- config -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"partiton": "gpu"}, "unknown slurm setting 'partiton'; known: account, args"),
        ({"gpus": "two"}, "gpus='two' is not a whole number of GPUs"),
        ({"gpus": True}, "gpus=True is not a whole number"),
        ({"cpus_per_task": 0}, "cpus_per_task=0 is not a whole number of CPUs"),
        ({"time": "soon"}, "time='soon' is not a time limit"),
        ({"mem": "lots"}, "mem='lots' is not memory per node"),
        ({"partition": "gpu; rm -rf /"}, "partition='gpu; rm -rf /' is not a partition name"),
        ({"env": {"NOT A NAME": "x"}}, "is not an object of variable names"),
        ({"sbatch_args": ["nodes=2"]}, "'nodes=2' is not an option"),
        ({"gres": "gpu:1", "gpus": 2}, "give gres, or gpus (with gpu_type), not both"),
        ({"drain_timeout_s": -1}, "drain_timeout_s=-1 is not seconds"),
    ],
)
def test_a_bad_setting_is_refused_by_name(config: dict[str, Any], error: str) -> None:
    with pytest.raises(ProviderError, match=re.escape(error)):
        check_config(config)
    with pytest.raises(ProviderError):
        SlurmProvider("hpc", config)


def test_a_full_config_is_accepted() -> None:
    check_config(
        {
            "partition": "gpu",
            "account": "ml-team",
            "qos": "high",
            "time": "1-00:00:00",
            "cpus_per_task": 8,
            "mem": "64G",
            "gpus": 4,
            "gpu_type": "h100",
            "sbatch_args": "--exclusive --constraint=ib",
            "export": "PATH,HOME",
            "command": ["/opt/lakeshore/bin/lakeshore-daemon"],
            "args": ["--prefetch", "2"],
            "env": {"HF_HOME": "/scratch/hf"},
            "concurrency": 4,
            "lease_s": 30,
            "drain_timeout_s": 120,
            "labels": {"gpu": "h100"},
            "state_dir": "/shared/lakeshore",
            "bin_dir": "/usr/bin",
            "command_timeout_s": 10,
        }
    )


# -- the batch script ---------------------------------------------------------------------------


def test_the_script_asks_for_the_launch_shape_and_carries_the_tags(tmp_path: Path) -> None:
    settings = {
        "partition": "gpu",
        "account": "ml",
        "qos": "high",
        "cpus_per_task": 8,
        "mem": "64G",
        "time": "4:00:00",
        "gpus": 2,
        "gpu_type": "h100",
        "sbatch_args": ["--exclusive"],
        "drain_timeout_s": 90,
    }
    text = script(settings, tmp_path)
    directives = [line.removeprefix("#SBATCH ") for line in text.splitlines() if "#SBATCH" in line]
    assert "--job-name=train-00" in directives
    assert "--partition=gpu" in directives and "--account=ml" in directives
    assert "--qos=high" in directives and "--cpus-per-task=8" in directives
    assert "--mem=64G" in directives and "--time=4:00:00" in directives
    assert "--gres=gpu:h100:2" in directives and "--exclusive" in directives
    # Slurm may signal up to 60 s early; the daemon's drain fits in what is left
    assert "--signal=B:TERM@150" in directives
    [comment] = [d for d in directives if d.startswith("--comment=")]
    assert "lakeshore:namespace=research" in comment and "lakeshore:provider=hpc" in comment
    assert f"lakeshore:spec={spec().config_hash}" in comment
    last = text.strip().splitlines()[-1]
    assert last.startswith("exec ") and "--name train-00" in last
    assert "--queue train --queue eval" in last and "--drain-timeout-s 90.0" in last


def test_the_token_is_never_in_the_script_nor_on_a_command_line(tmp_path: Path) -> None:
    text = script({"env": {"HF_HOME": "/scratch"}}, tmp_path)
    assert TOKEN not in text
    assert f'LAKESHORE_TOKEN="$(cat -- {tmp_path}/tokens/t)"' in text
    assert "--token" not in text.splitlines()[-1]
    assert "export HF_HOME=/scratch" in text


def test_the_token_file_is_the_users_alone(tmp_path: Path) -> None:
    path = token_path(tmp_path, TOKEN)
    assert path.read_text() == TOKEN
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert token_path(tmp_path, TOKEN) == path  # one file per token, written once


def test_a_sqlite_plane_is_the_daemons_home_and_needs_no_token(tmp_path: Path) -> None:
    db = tmp_path / "lakeshore.db"
    text = script({}, tmp_path, plane_url=str(db), plane_token=None)
    assert f"export LAKESHORE_HOME={tmp_path}" in text and "LAKESHORE_TOKEN" not in text
    with pytest.raises(ProviderError, match="cannot point them at"):
        script({}, tmp_path, plane_url=str(tmp_path / "other.db"))


# -- squeue -------------------------------------------------------------------------------------

TAGS = "lakeshore:namespace=research,lakeshore:daemon=train-00,lakeshore:provider=hpc"


def test_squeue_json_of_22_05_and_of_23_02_on() -> None:
    old = {
        "jobs": [
            {
                "job_id": 7,
                "job_state": "PENDING",
                "state_reason": "Resources",
                "submit_time": 1700000000,
                "comment": TAGS,
            },
            {"job_id": 8, "job_state": "COMPLETED", "submit_time": 1, "comment": TAGS},
            {"job_id": 9, "job_state": "RUNNING", "submit_time": 1, "comment": "someone's"},
        ]
    }
    [inst] = parse_json(json.dumps(old))
    assert (inst.id, inst.state, inst.note, inst.launched_at) == (
        "7",
        "pending",
        "Resources",
        1700000000.0,
    )
    assert inst.daemon == "train-00" and inst.namespace == "research"
    new = {
        "jobs": [
            {
                "job_id": 7,
                "job_state": ["RUNNING"],
                "state_reason": "None",
                "submit_time": {"set": True, "infinite": False, "number": 1700000000},
                "comment": TAGS,
            }
        ]
    }
    [inst] = parse_json(json.dumps(new))
    assert (inst.state, inst.note, inst.launched_at) == ("running", "", 1700000000.0)
    with pytest.raises(ProviderError, match="else than JSON"):
        parse_json("squeue: error: ...")


def test_squeue_format_fallback() -> None:
    text = (
        f"12|PENDING|2026-01-02T03:04:05|PartitionConfig|{TAGS}\n"
        f"13|COMPLETING|2026-01-02T03:04:05|None|{TAGS}\n"
        "14|RUNNING|2026-01-02T03:04:05|None|(null)\n"
    )
    first, second = parse_format(text)
    assert (first.id, first.state, first.note) == ("12", "pending", "PartitionConfig")
    assert second.state == "terminating" and second.tags["lakeshore:provider"] == "hpc"


def test_without_slurm_commands_the_error_says_where_they_are_looked_for(tmp_path: Path) -> None:
    provider = SlurmProvider("hpc", {"bin_dir": str(tmp_path)})
    with pytest.raises(ProviderError, match=f"cannot run {tmp_path}/squeue"):
        provider.list()


# -- the daemon in a Slurm job ------------------------------------------------------------------

SMI = "\n".join(f"{i}, GPU-{i}, NVIDIA H100, 81559 MiB" for i in range(4))


@pytest.mark.parametrize(
    ("environ", "indices"),
    [
        ({}, [0, 1, 2, 3]),  # not in Slurm, not pinned: every GPU
        ({"CUDA_VISIBLE_DEVICES": "1"}, [1]),
        ({"SLURM_JOB_ID": "5", "CUDA_VISIBLE_DEVICES": "2,3", "SLURM_JOB_GPUS": "2,3"}, [2, 3]),
        ({"SLURM_JOB_ID": "5", "SLURM_JOB_GPUS": "0,3"}, [0, 3]),
        ({"SLURM_JOB_ID": "5"}, []),  # a job given no GPU takes none of the node's
    ],
)
def test_a_daemon_in_a_slurm_job_serves_the_gpus_slurm_allocated(
    environ: dict[str, str], indices: list[int]
) -> None:
    kept = restrict(parse_nvidia_smi(SMI), visible_gpus(environ))
    assert [g.index for g in kept] == indices


def test_the_slurm_job_is_recorded_for_the_worker_row() -> None:
    assert slurm_facts({}) is None
    facts = slurm_facts(
        {
            "SLURM_JOB_ID": "42",
            "SLURM_JOB_GPUS": "0,1",
            "SLURM_JOB_PARTITION": "debug",
            "SLURMD_NODENAME": "gpu-7",
            "SLURM_CLUSTER_NAME": "lab",
        }
    )
    assert facts == {
        "job_id": "42",
        "cluster": "lab",
        "partition": "debug",
        "node": "gpu-7",
        "gpus": ["0", "1"],
    }
