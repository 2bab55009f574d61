"""The shape of a provider's launches: what one daemon it starts has (issue 34, item 5).

A provider config may state it, `"shape": {"gpus": 8, "gpu_type": "H100", "gpu_memory_gb": 80,
"cpus": 96, "memory_gb": 1024}`; an EC2 config's instance type sets it from the table below
(the controller also asks EC2's `describe_instance_types`), a Slurm config's gres from its GPU
count and type. A stated shape overrides the derived one key by key, so a config can hold GPUs
back or name the type the way the daemons' driver will.

The controller packs queued requests onto the shape to size a fleet in daemons; the
unschedulable sweep asks whether the shape could run a request that no live daemon can, to tell
`waiting_for_capacity` (a launch will run it) from `unschedulable` (nothing ever will). Both
read the same rules here, which are the daemon placer's rules (daemon/placement.py) for an empty
box: so a job a shape is said to run is one its launched daemon will take.

This module lives with the SDK, not with the provider plugins, because the plane's sweep and the
CLI read shapes without a provider plugin (or boto3) installed.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from .errors import InvalidArgument
from .resources import describe, gpu_types, type_matches

SHAPE_KEYS = ("gpus", "gpu_type", "gpu_memory_gb", "cpus", "memory_gb")
#: A GPU name, as the daemon's --gpu-type takes it (and jobs' gpu_type is matched against).
_GPU_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}")
_MAX_GPUS = 1024
_MAX_AMOUNT = 2.0**30


@dataclass(frozen=True)
class Shape:
    """What one launched daemon offers; None: not stated (not counted, as on the daemon)."""

    gpus: int = 0
    gpu_type: str | None = None
    gpu_memory_gb: float | None = None
    cpus: float | None = None
    memory_gb: float | None = None
    #: Where the shape came from, for the words: "config", "instance type p5.48xlarge", ...
    source: str = "config"
    #: The GPUs a job that states none is given: the daemons' `--gpus-per-job` (in `args`).
    default_gpus: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """The stated keys (the config's `shape` object, `--json` output)."""
        out: dict[str, Any] = {"gpus": self.gpus}
        for key in SHAPE_KEYS[1:]:
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out

    def describe(self) -> str:
        """In words: "8 x H100 (80 GB), 96 CPUs, 1024 GB"."""
        if self.gpus:
            kit = f"{self.gpus} x {self.gpu_type or 'GPU'}"
            if self.gpu_memory_gb:
                kit += f" ({self.gpu_memory_gb:g} GB)"
        else:
            kit = "no GPU"
        parts = [kit]
        if self.cpus is not None:
            parts.append(f"{self.cpus:g} CPUs")
        if self.memory_gb is not None:
            parts.append(f"{self.memory_gb:g} GB")
        return ", ".join(parts)

    def could_run(self, request: Mapping[str, Any]) -> bool:
        """Whether a daemon of this shape, with nothing running, could run `request` (a job's
        normalised resources): the placer's rules for an empty box."""
        cpus, memory = request.get("cpus"), request.get("memory_gb")
        if self.cpus is not None and cpus is not None and cpus > self.cpus:
            return False
        if self.memory_gb is not None and memory is not None and memory > self.memory_gb:
            return False
        wanted = self.wanted(request)
        if wanted <= 0:
            return True
        if max(1.0, wanted) > self.gpus:
            return False
        if gpu_types(request) and (
            self.gpu_type is None or not type_matches(request, self.gpu_type)
        ):
            return False
        needs = float(request.get("gpu_memory_gb") or 0)
        return needs <= (self.gpu_memory_gb or 0)

    def wanted(self, request: Mapping[str, Any]) -> float:
        """The GPUs `request` takes on a daemon of this shape (none stated: --gpus-per-job)."""
        gpus = request.get("gpus")
        return float(self.default_gpus if gpus is None else gpus)

    def daemon_args(self) -> list[str]:
        """The daemon options that declare this shape (the local provider's launches)."""
        args = ["--gpus", str(self.gpus)]
        if self.gpus and self.gpu_type:
            args += ["--gpu-type", self.gpu_type]
        if self.gpus and self.gpu_memory_gb:
            args += ["--gpu-memory-gb", f"{self.gpu_memory_gb:g}"]
        if self.cpus is not None:
            args += ["--cpus", f"{self.cpus:g}"]
        if self.memory_gb is not None:
            args += ["--memory-gb", f"{self.memory_gb:g}"]
        return args

    def slots(self, concurrency: object = None) -> int:
        """How many jobs one daemon of this shape runs at once: its `concurrency` setting, or
        the daemon's default (`default_slots`; a shape that states no CPUs: one per GPU)."""
        if isinstance(concurrency, int) and not isinstance(concurrency, bool) and concurrency > 0:
            return concurrency
        return default_slots(self.gpus, self.cpus)


def default_slots(gpus: int, cpus: float | None) -> int:
    """How many jobs a daemon runs at once when `--concurrency` does not cap it: what its
    resources allow, bounded by its CPUs (as Ray bounds tasks by num_cpus), at least one per
    GPU. The placer, not the slot count, keeps GPU jobs within the GPUs, so a fraction shares
    a GPU as asked. `cpus` None: nothing to bound by but the GPUs (one slot per GPU)."""
    if cpus is None:
        return max(1, gpus)
    return max(1, gpus, math.floor(cpus))


def check_shape(value: object, where: str = "shape") -> dict[str, Any]:
    """A config's `shape` checked and normalised; InvalidArgument naming the key otherwise."""
    if not isinstance(value, Mapping):
        raise InvalidArgument(
            f"{where} must be an object with keys among {', '.join(SHAPE_KEYS)}, "
            f'such as {{"gpus": 8, "gpu_type": "H100", "gpu_memory_gb": 80}}'
        )
    unknown = [k for k in value if k not in SHAPE_KEYS]
    if unknown:
        raise InvalidArgument(
            f"unknown {where} key(s) {', '.join(repr(k) for k in unknown)}; "
            f"use {', '.join(SHAPE_KEYS)}"
        )
    out: dict[str, Any] = {}
    if "gpus" in value:
        gpus = value["gpus"]
        if isinstance(gpus, bool) or not isinstance(gpus, int) or not 0 <= gpus <= _MAX_GPUS:
            raise InvalidArgument(
                f"{where}.gpus must be a whole number of GPUs from 0 to {_MAX_GPUS}, got {gpus!r}"
            )
        out["gpus"] = gpus
    if "gpu_type" in value:
        name = value["gpu_type"]
        if not isinstance(name, str) or not _GPU_NAME.fullmatch(name):
            raise InvalidArgument(
                f"{where}.gpu_type must be one GPU name of 1 to 64 letters, digits, spaces, "
                f"'.', '_' or '-' (such as 'H100' or 'NVIDIA A100-SXM4-80GB'), got {name!r}"
            )
        out["gpu_type"] = name
    for key in ("gpu_memory_gb", "cpus", "memory_gb"):
        if key in value:
            number = value[key]
            if (
                isinstance(number, bool)
                or not isinstance(number, (int, float))
                or not math.isfinite(number)
                or not 0 < number <= _MAX_AMOUNT
            ):
                raise InvalidArgument(
                    f"{where}.{key} must be a number above 0 (at most 2**30), got {number!r}"
                )
            out[key] = number
    if out.get("gpus", 0) == 0 and ("gpu_type" in out or "gpu_memory_gb" in out):
        raise InvalidArgument(f"{where}: gpu_type and gpu_memory_gb need gpus of 1 or more")
    return out


def _shape(gpus: int, name: str, gb: float, cpus: int, memory_gb: float, source: str) -> Shape:
    return Shape(gpus, name, gb, float(cpus), float(memory_gb), source)


#: The common EC2 GPU instance types: (GPUs, GPU name, GB per GPU, vCPUs, memory GiB).
EC2_TYPES: dict[str, tuple[int, str, float, int, float]] = {
    "p5.48xlarge": (8, "H100", 80, 192, 2048),
    "p5e.48xlarge": (8, "H200", 141, 192, 2048),
    "p5en.48xlarge": (8, "H200", 141, 192, 2048),
    "p4d.24xlarge": (8, "A100", 40, 96, 1152),
    "p4de.24xlarge": (8, "A100", 80, 96, 1152),
    "p3.2xlarge": (1, "V100", 16, 8, 61),
    "p3.8xlarge": (4, "V100", 16, 32, 244),
    "p3.16xlarge": (8, "V100", 16, 64, 488),
    "p3dn.24xlarge": (8, "V100", 32, 96, 768),
    **{
        f"{family}.{size}": (gpus, name, gb, cpus, memory * scale)
        for family, name, gb, scale in (
            ("g5", "A10G", 24, 1),
            ("g6", "L4", 24, 1),
            ("g6e", "L40S", 48, 2),
            ("g4dn", "T4", 16, 1),
        )
        for size, gpus, cpus, memory in (
            ("xlarge", 1, 4, 16),
            ("2xlarge", 1, 8, 32),
            ("4xlarge", 1, 16, 64),
            ("8xlarge", 1, 32, 128),
            ("12xlarge", 4, 48, 192),
            ("16xlarge", 1, 64, 256),
            ("24xlarge", 4, 96, 384),
            ("48xlarge", 8, 192, 768),
        )
        if not (family == "g4dn" and size in ("24xlarge", "48xlarge"))
    },
}


def ec2_shape(instance_type: str) -> Shape | None:
    """A common GPU instance type's shape from the table; None: not in it."""
    row = EC2_TYPES.get(instance_type)
    if row is None:
        return None
    return _shape(*row, source=f"instance type {instance_type}")


def slurm_shape(settings: Mapping[str, Any]) -> Shape | None:
    """A Slurm config's shape: GPUs from `gres` (gpu[:type]:N) or `gpus`/`gpu_type`, CPUs from
    `cpus_per_task`, memory from `mem`; None when it asks for no GPU."""
    gres = settings.get("gres")
    gpus, name = 0, settings.get("gpu_type")
    if isinstance(gres, str):
        for part in gres.split(","):
            bits = part.split(":")
            if bits[0] != "gpu":
                continue
            if len(bits) >= 2 and bits[-1].isdigit():
                gpus = int(bits[-1])
                name = bits[1] if len(bits) == 3 else None
            else:
                gpus, name = 1, bits[1] if len(bits) == 2 else None
    else:
        gpus = int(settings.get("gpus") or 0)
    if not gpus:
        return None
    cpus = settings.get("cpus_per_task")
    mem = _slurm_mem_gb(settings.get("mem"))
    return Shape(
        gpus=gpus,
        gpu_type=str(name) if name else None,
        cpus=float(cpus) if isinstance(cpus, int) else None,
        memory_gb=mem,
        source=f"gres {gres}" if isinstance(gres, str) else "gpus",
    )


def _slurm_mem_gb(mem: object) -> float | None:
    """Slurm's --mem (megabytes, or a K/M/G/T suffix) in GB."""
    match = re.fullmatch(r"(\d+)([KMGT]?)", str(mem)) if mem is not None else None
    if match is None:
        return None
    scale = {"K": 1 / 1024**2, "M": 1 / 1024, "": 1 / 1024, "G": 1.0, "T": 1024.0}
    return int(match.group(1)) * scale[match.group(2)]


def derived_shape(kind: str, settings: Mapping[str, Any]) -> Shape | None:
    """What the provider kind's own settings say, without asking anybody."""
    if kind == "ec2" and isinstance(settings.get("instance_type"), str):
        return ec2_shape(settings["instance_type"])
    if kind == "slurm":
        return slurm_shape(settings)
    return None


def overridden(base: Shape | None, settings: Mapping[str, Any]) -> Shape | None:
    """`base` with the config's stated `shape` laid over it key by key; None: neither."""
    stated = settings.get("shape")
    if not isinstance(stated, Mapping):
        return base
    merged = {**(base.as_dict() if base else {}), **stated}
    if not merged.get("gpus"):  # GPU keys of a derived shape mean nothing without GPUs
        merged = {k: v for k, v in merged.items() if k not in ("gpu_type", "gpu_memory_gb")}
    source = "config" if base is None else f"{base.source}, overridden by config"
    return Shape(
        gpus=int(merged.get("gpus", 0)),
        gpu_type=merged.get("gpu_type"),
        gpu_memory_gb=merged.get("gpu_memory_gb"),
        cpus=merged.get("cpus"),
        memory_gb=merged.get("memory_gb"),
        source=source,
    )


def launch_shape(
    kind: str, config: Mapping[str, Any], match: Mapping[str, Any] | None = None
) -> Shape | None:
    """The shape a launch of this provider config (with a queue policy's `match` laid over it)
    has, as far as the config and the built-in tables tell; None: unknown."""
    settings = {**config, **dict(match or {})}
    return with_defaults(overridden(derived_shape(kind, settings), settings), settings)


def with_defaults(shape: Shape | None, settings: Mapping[str, Any]) -> Shape | None:
    """`shape` knowing the daemons' `--gpus-per-job` from the config's `args` (a job that
    states no `gpus` takes that many on them)."""
    if shape is None:
        return None
    return replace(shape, default_gpus=gpus_per_job(settings.get("args")))


def gpus_per_job(args: object) -> float:
    """`--gpus-per-job N` (or `=N`) among daemon arguments, a list or one shell string."""
    if isinstance(args, str):
        words = shlex.split(args)
    elif isinstance(args, (list, tuple)):
        words = [str(a) for a in args]
    else:
        return 0.0
    for i, word in enumerate(words):
        value = None
        if word == "--gpus-per-job" and i + 1 < len(words):
            value = words[i + 1]
        elif word.startswith("--gpus-per-job="):
            value = word.split("=", 1)[1]
        if value is not None and value.isdigit():
            return float(value)
    return 0.0


def fits_words(request: Mapping[str, Any], shape: Shape, provider: str) -> str:
    """The words of a job a launch will run: which shape the controller launches for it."""
    return (
        f"needs {describe(request)}; no live daemon can run it: provider {provider} will "
        f"launch a daemon with {shape.describe()}"
    )
