"""Watching the box's GPUs while jobs run (issue 34 item 6): memory per job, and GPUs that fail.

Ray does not enforce a fractional job's GPU memory, and co-located jobs run each other out of
memory (ray-project/ray#13680). With `--enforce-gpu-memory` the daemon reads what each process
uses on each GPU (NVML's `nvmlDeviceGetComputeRunningProcesses`), adds up a job's (its child and
every descendant of it), and ends a job over its share (`gpus` x the GPU's memory, on each GPU
it holds; nothing on a GPU it does not) with cause `gpu_memory`, leaving its neighbours running.

A GPU that NVML reports as failed (a critical Xid that means the hardware, uncorrectable ECC
errors, or gone from the bus) is taken out of the daemon's offer for good (the claims' free
resources, `Placer.fail`), shown on its worker row (the heartbeat's `gpus_failed`: `lakeshore
daemon ls`), and the jobs on it are released back to the queue as a preemption (cause
`gpu_failed`): the box's fault, not the job's, so no attempt is charged.

Readings come from a `GpuReader`: NVML on a real box; `LAKESHORE_GPU_STATE` (a test seam, not a
setting) names a JSON file read instead, each poll, shaped as a reading is:

    {"processes": {"0": [{"pid": 4242, "used_mb": 61440}]}, "failed": {"1": "Xid 79"}}

NVML reports host pids: a daemon in a container of its own pid namespace cannot match them to
its children, and then enforces nothing (run it with the host's pid namespace to enforce).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psutil

from dreamlake.lakeshore.work.slot import Slot

from .inventory import Gpu
from .placement import Placer

SEAM_ENV = "LAKESHORE_GPU_STATE"
POLL_ENV = "LAKESHORE_GPU_POLL_S"
#: How often the GPUs are read: NVML answers in microseconds; an over-share job gets this long.
POLL_S = 1.0
#: Xid errors that mean the GPU itself is failing, not a job's fault (NVIDIA's Xid catalogue):
#: double-bit ECC (48), PMU/firmware (61, 62), row remapping (63, 64), NVLink (74), off the bus
#: (79), high single-bit ECC (92), contained / uncontained ECC (94, 95), GSP (119, 120), and
#: uncorrectable GPU errors (140). An Xid 13, 31 or 43 is the job's own (an illegal access).
FATAL_XIDS = frozenset({48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140})


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_mb: float


@dataclass(frozen=True)
class Reading:
    """One look at the GPUs, by GPU index: the processes on each, and those failed (why)."""

    processes: Mapping[int, Sequence[GpuProcess]] = field(default_factory=dict)
    failed: Mapping[int, str] = field(default_factory=dict)


class GpuReader(Protocol):
    def read(self, indexes: Sequence[int]) -> Reading: ...


class FileReader:
    """The test seam: a reading from a JSON file (absent: nothing to report)."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def read(self, indexes: Sequence[int]) -> Reading:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return Reading()
        processes = {
            int(i): [GpuProcess(int(p["pid"]), float(p["used_mb"])) for p in procs]
            for i, procs in (data.get("processes") or {}).items()
        }
        failed = {int(i): str(why) for i, why in (data.get("failed") or {}).items()}
        return Reading(processes, failed)


class NvmlReader:
    """Readings from NVML (`pip install 'dreamlake-lakeshore[gpu]'`)."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._events: Any = None
        self._xids: dict[int, str] = {}

    @classmethod
    def open(cls) -> NvmlReader | None:
        try:
            import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore]

            pynvml.nvmlInit()
        except Exception:  # no module, no driver: nothing to watch with
            return None
        return cls(pynvml)

    def read(self, indexes: Sequence[int]) -> Reading:
        nvml = self._nvml
        processes: dict[int, list[GpuProcess]] = {}
        failed: dict[int, str] = {}
        handles: dict[int, Any] = {}
        for index in indexes:
            try:
                handle = handles[index] = nvml.nvmlDeviceGetHandleByIndex(index)
                running = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except nvml.NVMLError as exc:
                if _is_lost(nvml, exc):
                    failed[index] = f"gone from the bus ({exc})"
                continue
            processes[index] = [
                GpuProcess(int(p.pid), (p.usedGpuMemory or 0) / (1024 * 1024)) for p in running
            ]
            ecc = self._uncorrectable(handle)
            if ecc:
                failed[index] = f"{ecc} uncorrectable ECC error(s)"
        self._take_xids(handles)
        for index, why in self._xids.items():
            failed.setdefault(index, why)
        return Reading(processes, failed)

    def _uncorrectable(self, handle: Any) -> int:
        nvml = self._nvml
        try:
            return int(
                nvml.nvmlDeviceGetTotalEccErrors(
                    handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
                )
            )
        except nvml.NVMLError:  # ECC off or not supported (consumer GPUs): nothing to say
            return 0

    def _take_xids(self, handles: Mapping[int, Any]) -> None:
        """The critical Xid events since the last look (registered at the first)."""
        nvml = self._nvml
        try:
            if self._events is None:
                self._events = nvml.nvmlEventSetCreate()
                for handle in handles.values():
                    nvml.nvmlDeviceRegisterEvents(
                        handle, nvml.nvmlEventTypeXidCriticalError, self._events
                    )
            while True:
                event = nvml.nvmlEventSetWait(self._events, 0)
                xid = int(event.eventData)
                if xid in FATAL_XIDS:
                    index = int(nvml.nvmlDeviceGetIndex(event.device))
                    self._xids.setdefault(index, f"Xid {xid}")
        except nvml.NVMLError:  # a timeout (no more events), or events not supported
            return


def _is_lost(nvml: Any, exc: BaseException) -> bool:
    lost = {getattr(nvml, "NVML_ERROR_GPU_IS_LOST", 15), getattr(nvml, "NVML_ERROR_UNKNOWN", 999)}
    return getattr(exc, "value", None) in lost


def open_reader(environ: Mapping[str, str] = os.environ) -> GpuReader | None:
    seam = environ.get(SEAM_ENV)
    if seam:
        return FileReader(seam)
    return NvmlReader.open()


@dataclass(frozen=True)
class OverShare:
    """A job using more GPU memory than it holds: on which GPU, how much, how much allowed."""

    index: int
    used_mb: float
    allowed_mb: float

    def words(self, gpu: Gpu | None, share: float) -> str:
        name = gpu.name if gpu is not None else "a GPU it was not given"
        of = f"its share of {self.allowed_mb / 1024:.1f} GB" if share else "none: not its GPU"
        held = ""
        if gpu is not None and share:
            held = f" (gpus={share:g} x {gpu.memory_mb / 1024:.0f} GB)"
        return (
            f"used {self.used_mb / 1024:.1f} GB of GPU {self.index}'s memory ({name}), more "
            f"than {of}{held}; ended by --enforce-gpu-memory"
        )


def over_share(
    used: Mapping[int, float], held: Mapping[int, float], gpus: Mapping[int, Gpu]
) -> list[OverShare]:
    """Where a job's use (MiB by GPU index) passes what it holds (its share by GPU index) of
    each GPU's memory. A GPU whose memory is unknown (0: declared without --gpu-memory-gb) is
    not judged; any use of a GPU the job was not given is over."""
    out: list[OverShare] = []
    for index, mb in sorted(used.items()):
        gpu = gpus.get(index)
        if gpu is not None and gpu.memory_mb <= 0:
            continue
        allowed = held.get(index, 0.0) * (gpu.memory_mb if gpu is not None else 0)
        if mb > allowed:
            out.append(OverShare(index, mb, allowed))
    return out


def job_use(pids: Iterable[int], reading: Reading) -> dict[int, float]:
    """MiB a job's processes use on each GPU, by GPU index (GPUs it does not use: absent)."""
    mine = set(pids)
    out: dict[int, float] = {}
    for index, procs in reading.processes.items():
        mb = sum(p.used_mb for p in procs if p.pid in mine)
        if mb > 0:
            out[index] = mb
    return out


def family(pid: int) -> set[int]:
    """A process and all of its descendants (a job's DataLoader workers, its shell's children)."""
    try:
        return {pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))}
    except psutil.Error:
        return {pid}


class GpuWatch:
    """The daemon's thread that reads the GPUs and acts on what it sees (see the module)."""

    def __init__(
        self,
        reader: GpuReader,
        placer: Placer,
        slots: Callable[[], Sequence[Slot]],
        *,
        enforce_memory: bool,
        log: Any,
        poll_s: float | None = None,
    ) -> None:
        self._reader = reader
        self._placer = placer
        self._slots = slots
        self._enforce = enforce_memory
        self._log = log
        self._poll_s = poll_s or float(os.environ.get(POLL_ENV) or POLL_S)
        self._gpus = {g.index: g for g in placer.gpus}
        #: Failed GPUs by index, and why; they stay failed until the daemon restarts.
        self.failed: dict[int, str] = {}
        self._lock = threading.Lock()

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self._poll_s):
            try:
                self.look()
            except Exception as exc:  # a reading's trouble never stops the daemon
                self._log.warning("gpu.watch_failed", error=repr(exc))

    def failed_gpus(self) -> list[dict[str, Any]]:
        """The failed GPUs as the worker row shows them (the heartbeat's `gpus_failed`)."""
        with self._lock:
            failed = dict(self.failed)
        return [
            {"index": i, "uuid": self._gpus[i].uuid, "name": self._gpus[i].name, "reason": why}
            for i, why in sorted(failed.items())
        ]

    def look(self) -> None:
        reading = self._reader.read(sorted(self._gpus))
        self._take_out(reading)
        held = self._placer.holding()
        for slot in self._slots():
            snap = slot.snapshot()
            inv_id, pid = snap.get("invocation"), snap.get("pid")
            placed = held.get(inv_id) if isinstance(inv_id, str) else None
            if not isinstance(inv_id, str) or placed is None:
                continue
            broken = [g for g, _ in placed.gpus if g.index in self.failed]
            if broken:
                gpu = broken[0]
                detail = f"released: GPU {gpu.index} ({gpu.name}) failed: {self.failed[gpu.index]}"
                if slot.abort(inv_id, "gpu_failed", None, detail):
                    self._log.warning("job.gpu_failed", invocation=inv_id, gpu=gpu.index)
                continue
            if self._enforce and isinstance(pid, int):
                self._judge(slot, inv_id, pid, placed.gpus, reading)

    def _take_out(self, reading: Reading) -> None:
        for index, why in reading.failed.items():
            if index in self._gpus and index not in self.failed:
                with self._lock:
                    self.failed[index] = why
                self._placer.fail(index)
                gpu = self._gpus[index]
                self._log.error("gpu.failed", gpu=index, uuid=gpu.uuid, reason=why)

    def _judge(
        self,
        slot: Slot,
        inv_id: str,
        pid: int,
        gpus: Sequence[tuple[Gpu, float]],
        reading: Reading,
    ) -> None:
        used = job_use(family(pid), reading)
        if not used:
            return
        held = {g.index: share for g, share in gpus}
        over = over_share(used, held, self._gpus)
        if not over:
            return
        first = over[0]
        detail = first.words(self._gpus.get(first.index), held.get(first.index, 0.0))
        if slot.abort(inv_id, "gpu_memory", 0.0, detail):
            self._log.warning(
                "job.gpu_memory",
                invocation=inv_id,
                gpu=first.index,
                used_mb=round(first.used_mb),
                allowed_mb=round(first.allowed_mb),
            )
