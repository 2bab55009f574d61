"""The daemon: the worker core with process slots, plus GPUs, systemd and signals.

Claiming, renewing, settling and draining are the worker core's (sdk/work/core.py), shared with
`run_worker`. What the daemon adds is what a box needs: the GPU plan and slot pinning
(inventory.py), one warm child process per slot (slots.py), load figures in the heartbeat,
systemd's READY / WATCHDOG / STATUS / STOPPING, and SIGTERM as a drain (sdk/signals.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from dreamlake.lakeshore.home import home
from dreamlake.lakeshore.objects.plane import child_environment
from dreamlake.lakeshore.plane.base import Plane
from dreamlake.lakeshore.shapes import default_slots
from dreamlake.lakeshore.signals import stop_signals
from dreamlake.lakeshore.types import Claim
from dreamlake.lakeshore.work.core import (
    EXIT_CONFIG,
    EXIT_CRASHED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    ConfigError,
    WorkerConfig,
    WorkerCore,
)
from dreamlake.lakeshore.work.slot import JobSink, Slot, SlotFactory

from .child import ChildFailed, spawn_context
from .gang import GangPart, advertise_addr
from .gpuwatch import GpuWatch, open_reader
from .inventory import (
    Gpu,
    LoadMeter,
    check_gpu_plan,
    detect_gpus,
    host_facts,
    slot_gpus,
    visible_gpus,
)
from .log import get_logger
from .oom import OomCounters
from .placement import Placer, declared_gpus
from .runtimes import DEFAULT_CACHE_GB, JobRuntimes
from .slots import ProcessSlot
from .systemd import Notifier

if TYPE_CHECKING:  # prometheus_client is imported only when --metrics-port asks for it
    from .environments import Environments
    from .metrics import DaemonMetrics

__all__ = [
    "EXIT_CONFIG",
    "EXIT_CRASHED",
    "EXIT_OK",
    "EXIT_UNREACHABLE",
    "ConfigError",
    "Daemon",
    "DaemonConfig",
]


@dataclass(frozen=True)
class DaemonConfig(WorkerConfig):
    gpus_per_job: int = 0
    handler: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Declared GPUs (`--gpus N`): the first N detected, else N of `gpu_type` / `gpu_memory_gb`
    #: made up (a CPU box in a test). None: every GPU detected.
    gpus: int | None = None
    gpu_type: str | None = None
    gpu_memory_gb: float | None = None
    #: What jobs' `cpus` / `memory_gb` requests are counted against; None: not counted.
    cpus: float | None = None
    memory_gb: float | None = None
    #: `--concurrency` not given: as many slots as the box's resources allow (`_auto_slots`).
    auto_concurrency: bool = False
    #: Where spot interruption notices come from (issue 35): None, "ec2" (daemon/spot.py), or
    #: "auto": "ec2" when local files say the box is an EC2 instance (daemon/ec2host.py).
    spot_notice: str | None = None
    #: End a job that uses more GPU memory than its share (gpuwatch.py; issue 34 item 6).
    enforce_gpu_memory: bool = False
    #: `--runtime-cache-gb`: the shipped trees this box keeps (runtimes.py, issue 46).
    runtime_cache_gb: float = DEFAULT_CACHE_GB
    #: `--advertise-addr`: where other boxes reach this one (a gang's rank 0, issue 47).
    advertise_addr: str | None = None


class Daemon(WorkerCore):
    """One `lakeshore-daemon`: `Daemon(plane, config).run()` returns the process exit code."""

    config: DaemonConfig

    def __init__(
        self,
        plane: Plane,
        config: DaemonConfig,
        *,
        notifier: Notifier | None = None,
        gpus: Sequence[Gpu] | None = None,
        metrics: DaemonMetrics | None = None,
    ) -> None:
        super().__init__(
            plane,
            config,
            notifier=notifier or Notifier(None),
            log=get_logger(worker=config.name),
            observers=[] if metrics is None else [metrics],
        )
        self._metrics = metrics
        self._gpus = None if gpus is None else list(gpus)
        self._placer: Placer | None = None
        self._gpuwatch: GpuWatch | None = None
        self._meter: LoadMeter | None = None

    def run(self, *, install_signals: bool = True) -> int:
        """Serve until drained or stopped; SIGTERM/SIGINT handlers live only inside this call."""
        with stop_signals(self._on_first_signal, self._on_second_signal, install=install_signals):
            try:
                return super().run()
            except ConfigError as exc:
                self._log.error("daemon.config_error", error=str(exc))
                return EXIT_CONFIG
            finally:
                close = getattr(self.notifier, "close", None)
                if close is not None:
                    close()

    def _on_first_signal(self, signum: int) -> None:
        # SIGTERM is how systemd, Kubernetes and Slurm say the box (or the pod) is going away:
        # a preemption notice (issue 35), whose jobs may checkpoint and come back elsewhere.
        self.preempt(f"signal {signum}")

    def _on_second_signal(self, signum: int) -> None:
        self.stop_now(f"second signal {signum}")

    # -- what the daemon adds to the core -----------------------------------------------------

    def _prepare(self) -> SlotFactory:
        gpus = self._inventory()
        if self.config.auto_concurrency:
            self.config = replace(self.config, concurrency=self._auto_slots(gpus))
        config = self.config
        warm = max(1, len(gpus))  # slots past one per GPU start their child at their first job
        per_job = config.gpus_per_job
        problem = check_gpu_plan(
            gpus, 1 if config.auto_concurrency else config.concurrency, per_job
        )
        if problem:
            raise ConfigError(problem)
        self._gpus = gpus
        self._placer = Placer(gpus, config.cpus, config.memory_gb, float(per_job))
        self.observers.add(self._placer)  # an ended run's resources are free again
        ctx = spawn_context()
        env = {"LAKESHORE_STORAGE": config.storage} if config.storage else {}
        env |= child_environment(self.plane)  # its jobs' objects go through this plane
        oom = OomCounters()  # found once: which OOM-kill counters this box offers
        runtimes = JobRuntimes(
            self.plane,
            home() / "runtime",
            cache_bytes=int(config.runtime_cache_gb * (1 << 30)),
            environments=_environments,
        )
        if self._metrics is not None:
            self._metrics.watch_runtimes(runtimes.figures)
        addr = advertise_addr(config.advertise_addr)

        def gang_part(claim: Claim) -> GangPart:
            return GangPart(self.plane, claim, addr, self._log, grace_s=config.preempt_grace_s)

        def slot(index: int, sink: JobSink) -> ProcessSlot:
            return ProcessSlot(
                index,
                ctx=ctx,
                sink=sink,
                handler=config.handler,
                gpus=slot_gpus(gpus, index, config.gpus_per_job),
                env=env,
                kill_grace_s=config.kill_grace_s,
                gpus_for=self._gpus_for,
                oom=oom,
                warm=index < warm,
                runtimes=runtimes,
                gangs=gang_part,
            )

        return slot

    def _auto_slots(self, gpus: Sequence[Gpu]) -> int:
        """Slots with no `--concurrency`: what the resources allow, bounded by the CPUs
        (`--cpus`, else the cores this process may run on), at least one per GPU. A daemon that
        offers no GPU and counts no CPUs has nothing that divides its box: one slot, as ever."""
        cpus = self.config.cpus
        if cpus is None and gpus:
            cpus = float(_cores())
        return default_slots(len(gpus), cpus)

    def _inventory(self) -> list[Gpu]:
        """The GPUs offered: given (tests), declared (`--gpus N`), or detected."""
        if self._gpus is not None:
            return list(self._gpus)
        config = self.config
        found = detect_gpus()
        if config.gpus is None:
            return found
        if len(found) >= config.gpus and config.gpu_type is None:
            return found[: config.gpus]  # a box that holds some back
        visible = visible_gpus(os.environ)
        return declared_gpus(config.gpus, config.gpu_type, config.gpu_memory_gb, visible)

    # -- placement (issue 34): which GPUs each job holds -------------------------------------

    def _offer(self) -> dict[str, Any] | None:
        return self._placer.free() if self._placer is not None else None

    def _settles_first(self) -> bool:
        return bool(self._gpus)

    def _placed(self, claim: Claim) -> bool:
        placer = self._placer
        if placer is None:
            return True
        deadline = None if claim.timeout_s is None else time.time() + claim.timeout_s
        placed = placer.place(claim.id, claim.resources, deadline)
        if placed is None:  # the store's figures and the placer's disagree: give it back
            self._log.warning("job.unplaced", invocation=claim.id, resources=claim.resources)
            self._settle_call(claim, "release", lambda: self.plane.release(claim.id, claim.lease))
            return False
        if placed.gpus or claim.resources:
            record = placed.record(self.config.name)
            self._settle_call(
                claim, "place", lambda: self.plane.place(claim.id, claim.lease, record)
            )
        return True

    def _gpus_for(self, claim: Claim) -> list[Gpu]:
        placed = self._placer.holding().get(claim.id) if self._placer is not None else None
        return [g for g, _ in placed.gpus] if placed is not None else []

    def _slot_for(self, claim: Claim, idle: Sequence[Slot]) -> Slot:
        """An idle slot whose warm child already sees the job's GPUs, else the first."""
        wanted = self._gpus_for(claim)
        for slot in idle:
            if isinstance(slot, ProcessSlot) and slot.gpus == wanted:
                return slot
        return idle[0]

    def _release_unstarted(self, claim: Claim) -> None:
        super()._release_unstarted(claim)
        if self._placer is not None:
            self._placer.release(claim.id)

    def _worker_info(self) -> dict[str, Any]:
        facts = host_facts(
            concurrency=self.config.concurrency,
            gpus=self._gpus or [],
            labels=dict(self.config.labels),
            gpus_per_job=self.config.gpus_per_job,
        )
        # What jobs are placed against (the unschedulable sweep reads it): the GPUs offered,
        # and the CPUs and memory declared to be counted.
        facts["resources"] = {
            "gpus": len(self._gpus or []),
            "cpus": self.config.cpus,  # None: not counted (--cpus not given)
            "memory_gb": self.config.memory_gb,
        }
        return facts

    def _load(self) -> dict[str, Any]:
        if self._meter is None:
            self._meter = LoadMeter()
        load = self._meter.measure([s.snapshot() for s in self.slots])
        if self._placer is not None and self._placer.gpus:
            load["gpu_use"] = self._placer.in_use()
        if self._gpuwatch is not None and self._gpuwatch.failed:
            load["gpus_failed"] = self._gpuwatch.failed_gpus()
        return load

    def _ready_fields(self) -> dict[str, Any]:
        return {"gpus": [g.index for g in self._gpus or []]}

    def _on_ready(self) -> None:
        super()._on_ready()
        self._watch_gpus()
        if self._watches_spot(self.config.spot_notice):
            from .spot import SpotWatcher

            watcher = SpotWatcher(self, self._halt)
            self._spawn_thread("lakeshore-spot", watcher.run)

    def _watch_gpus(self) -> None:
        """Read the GPUs while jobs run: failed ones out of the offer, and with
        --enforce-gpu-memory each job's memory against its share (gpuwatch.py)."""
        placer = self._placer
        if placer is None or not placer.gpus:
            return
        reader = open_reader()
        if reader is None:
            if self.config.enforce_gpu_memory:
                self._log.warning(
                    "gpu.unwatched", reason="NVML is not available: --enforce-gpu-memory is off"
                )
            return
        watch = self._gpuwatch = GpuWatch(
            reader,
            placer,
            lambda: self.slots,
            enforce_memory=self.config.enforce_gpu_memory,
            log=self._log,
        )
        self._spawn_thread("lakeshore-gpus", lambda: watch.run(self._halt))

    def _watches_spot(self, mode: str | None) -> bool:
        """`auto` polls the metadata service only where sysfs says this is EC2: elsewhere
        169.254.169.254 is never contacted. The decision is logged once, here."""
        if mode != "auto":
            return mode == "ec2"
        from .ec2host import ec2_evidence

        evidence = ec2_evidence()
        if evidence is None:
            self._log.debug("spot.not_on_ec2")
            return False
        self._log.info("spot.detected", evidence=evidence)
        return True

    def _start_slots(self, factory: SlotFactory) -> bool:
        started = super()._start_slots(factory)
        if self.fatal is not None and not isinstance(self.fatal, ChildFailed):
            self.fatal = ChildFailed(str(self.fatal))
        return started


def _cores() -> int:
    """The CPUs this process may run on (its affinity: a cgroup or taskset bounds it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _environments() -> Environments:
    """The box's job environments (environments.py), made at the first job with requirements:
    uv is found then, not at every daemon's start."""
    from .environments import Environments

    # LAKESHORE_UV: the uv this box's operator chose, else the daemon extra's, else PATH's.
    return Environments(home() / "runtime" / "envs", uv=os.environ.get("LAKESHORE_UV") or None)
