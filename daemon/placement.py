"""Which of the box's GPUs (and how much of its CPUs and memory) each running job holds.

The store hands a daemon only jobs that fit what it says is free (`free()`, the claim's `fits`
fragment); the daemon, not the store, picks the GPUs (`place`): a fraction goes on the GPU
with the least room that still takes it, so fractions pack onto as few GPUs as fit and whole
GPUs stay whole; a whole-GPU job takes GPUs nobody uses, of its first acceptable type. What a
job holds is given back when its slot ends it, however it ended (`release`).

One claim thread places and every slot thread releases, so the books are kept under a lock.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dreamlake.lakeshore.resources import gpu_types, preferred_type, type_matches
from dreamlake.lakeshore.types import Claim
from dreamlake.lakeshore.work.observer import WorkerObserver
from dreamlake.lakeshore.work.slot import Outcome

from .inventory import Gpu

#: Shares are kept in 1/EPS units, so 0.25 + 0.25 + 0.5 is exactly one GPU.
_UNITS = 1_000_000


@dataclass(frozen=True)
class Placed:
    """Where one job runs: its GPUs (each with the share it holds), CPUs and memory."""

    gpus: tuple[tuple[Gpu, float], ...] = ()
    cpus: float = 0.0
    memory_gb: float = 0.0
    #: The acceptable type the job got, when it asked for some (the first it could have).
    gpu_type: str | None = None
    #: When the job surely ends (its start + timeout_s, epoch seconds); None: no timeout.
    deadline: float | None = None

    @property
    def indexes(self) -> list[int]:
        return [g.index for g, _ in self.gpus]

    def record(self, worker: str) -> dict[str, Any]:
        """The placement as the invocation row keeps it (`Plane.place`)."""
        out: dict[str, Any] = {
            "worker": worker,
            "gpus": [
                {"index": g.index, "uuid": g.uuid, "name": g.name, "share": share}
                for g, share in self.gpus
            ],
        }
        if self.gpu_type is not None:
            out["gpu_type"] = self.gpu_type
        if self.cpus:
            out["cpus"] = self.cpus
        if self.memory_gb:
            out["memory_gb"] = self.memory_gb
        return out


@dataclass
class Placer(WorkerObserver):
    """The box's GPUs, CPUs and memory, and what each running job holds of them; as the
    worker's observer, it frees a job's share when the job's run ends."""

    gpus: Sequence[Gpu]
    #: None: not counted (a job's cpus / memory_gb request is not checked against the box).
    cpus: float | None = None
    memory_gb: float | None = None
    #: The request of a job that states no `gpus` (`--gpus-per-job`).
    default_gpus: float = 0.0
    _used: dict[int, int] = field(default_factory=dict)  # GPU index -> units held
    _held: dict[str, Placed] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    #: GPUs taken out of the offer for good (gpuwatch.py: NVML says they failed).
    _failed: set[int] = field(default_factory=set)

    def fail(self, index: int) -> None:
        """Offer GPU `index` no more: no claim is sent with it free, no job is placed on it.
        What runs on it is the watcher's to release; its share is given back as usual."""
        with self._lock:
            self._failed.add(index)

    @property
    def healthy(self) -> list[Gpu]:
        return [g for g in self.gpus if g.index not in self._failed]

    def wanted(self, request: Mapping[str, Any]) -> float:
        gpus = request.get("gpus")
        return float(self.default_gpus if gpus is None else gpus)

    def free(self) -> dict[str, Any]:
        """What is free now, as a claim sends it (`resources.check_free`)."""
        with self._lock:
            healthy = self.healthy
            room = {g.index: _UNITS - self._used.get(g.index, 0) for g in healthy}
            roomy = [g for g in healthy if room[g.index] > 0]
            out: dict[str, Any] = {
                "gpus_whole": sum(1 for g in healthy if room[g.index] == _UNITS),
                "gpu_share": max((room[g.index] for g in roomy), default=0) / _UNITS,
                "gpu_names": sorted({g.name for g in roomy}),
                "gpu_memory_gb": max((g.memory_mb / 1024 for g in roomy), default=0.0),
                "default_gpus": self.default_gpus,
            }
            held = list(self._held.values())
            used = dict(self._used)
        if self.cpus is not None:
            out["cpus"] = max(0.0, self.cpus - sum(p.cpus for p in held))
        if self.memory_gb is not None:
            out["memory_gb"] = max(0.0, self.memory_gb - sum(p.memory_gb for p in held))
        if healthy:  # what a reservation for the head of the queue needs (no starvation)
            out["box"] = self._box(healthy, held, used)
        return out

    def _box(self, healthy: list[Gpu], held: list[Placed], used: dict[int, int]) -> dict[str, Any]:
        """What the box has in all, and when its running jobs surely free whole GPUs."""
        box: dict[str, Any] = {
            "gpus_whole": len(healthy),
            "gpu_share": 1.0,
            "gpu_names": sorted({g.name for g in healthy}),
            "gpu_memory_gb": max(g.memory_mb / 1024 for g in healthy),
            "default_gpus": self.default_gpus,
        }
        if self.cpus is not None:
            box["cpus"] = self.cpus
        if self.memory_gb is not None:
            box["memory_gb"] = self.memory_gb
        steps: list[list[float]] = []
        left = dict(used)
        for placed in sorted((p for p in held if p.deadline is not None), key=_deadline):
            for gpu, share in placed.gpus:
                left[gpu.index] = left.get(gpu.index, 0) - round(share * _UNITS)
            whole = sum(1 for g in healthy if left.get(g.index, 0) <= 0)
            steps.append([float(placed.deadline or 0), float(whole)])
        box["whole_free_at"] = steps
        return box

    def could_ever(self, request: Mapping[str, Any]) -> bool:
        """Whether this box, empty, could run the job (for the reservation of the head)."""
        return self._pick(request, dict.fromkeys((g.index for g in self.gpus), 0)) is not None

    def place(
        self, inv_id: str, request: Mapping[str, Any], deadline: float | None = None
    ) -> Placed | None:
        """Take what the job asks for; None when it does not fit what is free now.
        `deadline`: when the job surely ends (its timeout), for reservations."""
        with self._lock:
            if inv_id in self._held:
                return self._held[inv_id]
            held = list(self._held.values())
            if self.cpus is not None and float(request.get("cpus") or 0) > self.cpus - sum(
                p.cpus for p in held
            ):
                return None
            if self.memory_gb is not None and float(
                request.get("memory_gb") or 0
            ) > self.memory_gb - sum(p.memory_gb for p in held):
                return None
            picked = self._pick(request, self._used)
            if picked is None:
                return None
            gpus, gpu_type = picked
            placed = Placed(
                gpus=gpus,
                cpus=float(request.get("cpus") or 0),
                memory_gb=float(request.get("memory_gb") or 0),
                gpu_type=gpu_type,
                deadline=deadline,
            )
            for gpu, share in gpus:
                self._used[gpu.index] = self._used.get(gpu.index, 0) + round(share * _UNITS)
            self._held[inv_id] = placed
            return placed

    def job_ended(self, claim: Claim, outcome: Outcome, run_s: float) -> None:
        self.release(claim.id)

    def release(self, inv_id: str) -> None:
        """Give back what the job held (nothing if it held nothing)."""
        with self._lock:
            placed = self._held.pop(inv_id, None)
            if placed is None:
                return
            for gpu, share in placed.gpus:
                left = self._used.get(gpu.index, 0) - round(share * _UNITS)
                if left > 0:
                    self._used[gpu.index] = left
                else:
                    self._used.pop(gpu.index, None)

    def holding(self) -> dict[str, Placed]:
        with self._lock:
            return dict(self._held)

    def in_use(self) -> dict[str, Any]:
        """GPUs in use and free now, for the heartbeat (the dashboard shows them): `used` sums
        the shares held, `free` is what healthy GPUs have left, `failed` is out of the offer."""
        with self._lock:
            healthy = self.healthy
            held = sum(self._used.get(g.index, 0) for g in healthy) / _UNITS
            return {
                "total": len(self.gpus),
                "used": round(held, 6),
                "free": round(len(healthy) - held, 6),
                "failed": len(self.gpus) - len(healthy),
            }

    def _pick(
        self, request: Mapping[str, Any], used: Mapping[int, int]
    ) -> tuple[tuple[tuple[Gpu, float], ...], str | None] | None:
        """The GPUs the job would get given `used`, and the type it got; None: no fit."""
        wanted = self.wanted(request)
        if wanted <= 0:
            return (), None
        memory_gb = float(request.get("gpu_memory_gb") or 0)
        candidates = [
            g
            for g in self.healthy
            if type_matches(request, g.name) and g.memory_mb / 1024 >= memory_gb
        ]
        if gpu_types(request):  # the first acceptable type the box has, only that one
            chosen = preferred_type(request, [g.name for g in candidates])
            if chosen is None:
                return None
            candidates = [g for g in candidates if chosen.lower() in g.name.lower()]
        else:
            chosen = None
        if wanted < 1:
            units = round(wanted * _UNITS)
            fits = [g for g in candidates if _UNITS - used.get(g.index, 0) >= units]
            if not fits:
                return None
            # Best fit: the GPU with the least room that takes it, so shares pack together.
            best = min(fits, key=lambda g: (_UNITS - used.get(g.index, 0), g.index))
            return ((best, wanted),), chosen
        whole = [g for g in candidates if used.get(g.index, 0) == 0]
        if len(whole) < wanted:
            return None
        return tuple((g, 1.0) for g in whole[: int(wanted)]), chosen


def _deadline(placed: Placed) -> float:
    return placed.deadline or 0.0


def declared_gpus(
    count: int, name: str | None, memory_gb: float | None, visible: str | None = None
) -> list[Gpu]:
    """`--gpus N [--gpu-type NAME --gpu-memory-gb G]`: GPUs this daemon offers without asking
    the driver (a CPU box in a test, or a box that holds some back). `visible`: the daemon's
    own CUDA_VISIBLE_DEVICES (or what Slurm allocated it, `inventory.visible_gpus`): then the
    declared GPUs are those, so two daemons of one box never hand out the same index."""
    indexes = list(range(count))
    if visible is not None:
        named = [v.strip() for v in visible.split(",") if v.strip()]
        if named and all(v.isdigit() for v in named):
            indexes = [int(v) for v in named][:count]
    return [
        Gpu(
            index=i,
            uuid=f"declared-{i}",
            name=name or "declared GPU",
            memory_mb=int((memory_gb or 0) * 1024),
        )
        for i in indexes
    ]
