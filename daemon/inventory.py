"""What the box has (CPUs, memory, GPUs) and how loaded it is: the worker row's facts and load.

The controller and `lakeshore daemon show` read these figures from the worker row; the daemon is
the only process that can measure them, so it reports them at registration (fixed facts) and in
each heartbeat (load). GPUs come from NVML when `pynvml` (nvidia-ml-py) imports, else from
`nvidia-smi`, else there are none: a CPU box is a normal box, not an error.
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import psutil

from dreamlake.lakeshore import __version__

#: How long `nvidia-smi` may take before the daemon starts without GPUs rather than hang.
NVIDIA_SMI_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    memory_mb: int


def detect_gpus() -> list[Gpu]:
    """The GPUs this daemon may use, restricted by its own CUDA_VISIBLE_DEVICES when set.

    A unit pinned to some GPUs (`Environment=CUDA_VISIBLE_DEVICES=2,3`) then hands out only
    those to its slots; so does a daemon in a Slurm job (`visible_gpus`).
    """
    gpus = _from_nvml()
    if gpus is None:
        gpus = _from_nvidia_smi()
    return restrict(gpus, visible_gpus(os.environ))


def visible_gpus(environ: Mapping[str, str]) -> str | None:
    """Which GPUs the process may use, as a CUDA_VISIBLE_DEVICES value; None: every one.

    In a Slurm job, exactly those Slurm allocated: CUDA_VISIBLE_DEVICES as Slurm set it (device
    indices as this process sees them, also under a cgroup device constraint), else
    SLURM_JOB_GPUS, else none at all. Without a device constraint every GPU of the node is in
    sight, and a job that was given none must not take another job's.
    """
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None or not environ.get("SLURM_JOB_ID"):
        return visible
    return environ.get("SLURM_JOB_GPUS", "")


def slurm_facts(environ: Mapping[str, str]) -> dict[str, Any] | None:
    """The Slurm job this daemon runs in, for its worker row (None outside Slurm): the
    controller's slurm provider and an operator's `scontrol show job` meet on the job id."""
    job_id = environ.get("SLURM_JOB_ID")
    if not job_id:
        return None
    gpus = environ.get("SLURM_JOB_GPUS", "")
    return {
        "job_id": job_id,
        "cluster": environ.get("SLURM_CLUSTER_NAME"),
        "partition": environ.get("SLURM_JOB_PARTITION"),
        "node": environ.get("SLURMD_NODENAME"),
        "gpus": [g for g in gpus.split(",") if g],
    }


def restrict(gpus: Sequence[Gpu], visible: str | None) -> list[Gpu]:
    """Keep the GPUs named (by index or UUID) in a CUDA_VISIBLE_DEVICES value, in its order."""
    if visible is None:
        return list(gpus)
    kept: list[Gpu] = []
    for item in (v.strip() for v in visible.split(",")):
        if not item:
            continue
        for gpu in gpus:
            if (item.isdigit() and gpu.index == int(item)) or gpu.uuid.startswith(item):
                if gpu not in kept:
                    kept.append(gpu)
                break
    return kept


def _from_nvml() -> list[Gpu] | None:
    try:
        import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound and friends: no driver here
        return None
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total
            gpus.append(
                Gpu(
                    index=i,
                    uuid=uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                    name=name.decode() if isinstance(name, bytes) else str(name),
                    memory_mb=int(memory) // (1024 * 1024),
                )
            )
        return gpus
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _from_nvidia_smi() -> list[Gpu]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return parse_nvidia_smi(out)


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """Parse `index, uuid, name, memory` CSV lines; memory with or without the ` MiB` unit."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4 or not parts[0].isdigit():
            continue
        index, uuid, memory = parts[0], parts[1], parts[-1]
        name = ", ".join(parts[2:-1])
        digits = memory.split()[0] if memory else ""
        gpus.append(
            Gpu(
                index=int(index),
                uuid=uuid,
                name=name,
                memory_mb=int(digits) if digits.isdigit() else 0,
            )
        )
    return gpus


def slot_gpus(gpus: Sequence[Gpu], slot: int, per_job: int) -> list[Gpu]:
    """Slot i gets GPUs [i*K .. i*K+K-1] of the inventory: disjoint, stable across restarts."""
    return list(gpus[slot * per_job : (slot + 1) * per_job])


def check_gpu_plan(gpus: Sequence[Gpu], concurrency: int, per_job: int) -> str | None:
    """Why `concurrency` slots of `per_job` GPUs do not fit this box, or None when they do."""
    if per_job <= 0:
        return None
    needed = concurrency * per_job
    if needed > len(gpus):
        return (
            f"--concurrency {concurrency} x --gpus-per-job {per_job} needs {needed} GPU(s); "
            f"this box has {len(gpus)} visible"
        )
    return None


def host_facts(
    *, concurrency: int, gpus: Sequence[Gpu], labels: dict[str, str], gpus_per_job: int
) -> dict[str, Any]:
    """The fixed facts registered once on the worker row (`info`); `slurm` in a Slurm job."""
    facts: dict[str, Any] = {
        "version": __version__,
        "python": platform.python_version(),
        "platform": sys.platform,
        "hostname": socket.gethostname(),
        "cpus": os.cpu_count() or 1,
        "memory_mb": psutil.virtual_memory().total // (1024 * 1024),
        "concurrency": concurrency,
        "gpus_per_job": gpus_per_job,
        "gpus": [asdict(g) for g in gpus],
        "labels": dict(labels),
    }
    slurm = slurm_facts(os.environ)
    if slurm is not None:
        facts["slurm"] = slurm
    return facts


class LoadMeter:
    """Load figures for a heartbeat; psutil's cpu_percent is measured between two calls."""

    def __init__(self) -> None:
        self._process = psutil.Process()
        psutil.cpu_percent(interval=None)  # prime: the first reading is meaningless

    def measure(self, slots: list[dict[str, Any]]) -> dict[str, Any]:
        memory = psutil.virtual_memory()
        rss = self._process.memory_info().rss
        try:
            for child in self._process.children(recursive=True):
                try:
                    rss += child.memory_info().rss
                except psutil.Error:
                    continue  # exited between the listing and the read
        except psutil.Error:
            pass
        busy = sum(1 for s in slots if s.get("state") == "busy")
        return {
            "cpu_percent": psutil.cpu_percent(interval=None),
            "memory_percent": memory.percent,
            "memory_available_mb": memory.available // (1024 * 1024),
            "rss_mb": round(rss / (1024 * 1024), 1),
            "load_avg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "busy": busy,
            "idle": len(slots) - busy,
            "slots": slots,
        }
