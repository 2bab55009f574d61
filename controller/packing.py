"""How many daemons of a launch shape the queued and running jobs need: first-fit decreasing.

Jobs ask for GPUs (whole ones, or a share of one), CPUs and memory; a provider's launches all
have one shape (sdk/shapes.py). Sizing a fleet in jobs (one daemon per job, or per
`target_per_worker` jobs) launches eight 8-GPU boxes for eight 1-GPU evals, or one box for two
8-GPU trainings that cannot share it. Packing the requests onto the shape instead gives the
daemons the work needs: the largest requests first, each into the first daemon with room (as
Ray's autoscaler bin-packs resource demands onto node types), with a daemon's room counted the
way its placer counts it (daemon/placement.py): whole GPUs no job uses, shares packed onto the
fullest GPU that takes them, CPUs and memory where the shape states them, and `slots` jobs at
once (the daemon's concurrency).

Identical requests are placed as a group, so a million queued jobs of a few shapes cost a few
passes over the daemons; packing stops once it has opened `limit` daemons (the policy's max:
more could not be launched anyway). A gang's parts go each onto a different daemon, as the
plane places them (one daemon is one node), so a 4-node gang opens at least four. Jobs no
daemon of the shape could ever run are counted apart (`unfit`): they are not demand, the sweep
names them unschedulable.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dreamlake.lakeshore.resources import describe
from dreamlake.lakeshore.shapes import Shape

#: Shares are counted in millionths of a GPU, as the placer counts them.
_UNITS = 1_000_000
_EPS = 1e-9


@dataclass(frozen=True)
class Demand:
    """`count` jobs asking for `request` (normalised resources; {} asks for nothing), each on
    `nodes` daemons at once (a gang, issue 47: `request` is per part)."""

    request: Mapping[str, Any]
    count: int
    nodes: int = 1


@dataclass(frozen=True)
class Packing:
    daemons: int
    #: Jobs a daemon of the shape could run: the demand.
    jobs: int
    #: Jobs none could: left out of the demand.
    unfit: int = 0
    #: GPUs the fitting jobs ask for, in all.
    gpus: float = 0.0
    #: Packing stopped at `limit` daemons with jobs left over.
    capped: bool = False

    def words(self, shape: Shape) -> str:
        text = (
            f"{self.jobs} job(s) asking {self.gpus:g} GPU(s) packed onto {shape.describe()} "
            f"-> {self.daemons}{'+' if self.capped else ''} daemon(s)"
        )
        if self.unfit:
            text += f"; {self.unfit} job(s) no such daemon could run left out"
        return text


@dataclass
class _Daemon:
    rooms: list[int]
    cpus: float | None
    memory_gb: float | None
    slots: int


@dataclass
class _Packer:
    shape: Shape
    slots: int
    daemons: list[_Daemon] = field(default_factory=list)

    def new(self) -> _Daemon:
        d = _Daemon([_UNITS] * self.shape.gpus, self.shape.cpus, self.shape.memory_gb, self.slots)
        self.daemons.append(d)
        return d

    def room_for(self, d: _Daemon, request: Mapping[str, Any]) -> int:
        """How many more jobs of `request` fit on `d`."""
        n = d.slots
        for have, key in ((d.cpus, "cpus"), (d.memory_gb, "memory_gb")):
            asked = float(request.get(key) or 0)
            if have is not None and asked > 0:
                n = min(n, math.floor(have / asked + _EPS))
        wanted = self.shape.wanted(request)
        if wanted >= 1:
            n = min(n, sum(1 for r in d.rooms if r == _UNITS) // int(wanted))
        elif wanted > 0:
            units = round(wanted * _UNITS)
            n = min(n, sum(r // units for r in d.rooms))
        return max(0, n)

    def take(self, d: _Daemon, request: Mapping[str, Any], n: int) -> None:
        """Place `n` jobs of `request` on `d` (room_for said they fit)."""
        d.slots -= n
        if d.cpus is not None:
            d.cpus -= n * float(request.get("cpus") or 0)
        if d.memory_gb is not None:
            d.memory_gb -= n * float(request.get("memory_gb") or 0)
        wanted = self.shape.wanted(request)
        if wanted >= 1:
            whole = [i for i, r in enumerate(d.rooms) if r == _UNITS][: n * int(wanted)]
            for i in whole:
                d.rooms[i] = 0
        elif wanted > 0:  # best fit, one at a time: the fullest GPU that still takes it
            units = round(wanted * _UNITS)
            for _ in range(n):
                i = min((i for i, r in enumerate(d.rooms) if r >= units), key=lambda i: d.rooms[i])
                d.rooms[i] -= units


def _size(shape: Shape, demand: Demand) -> tuple[float, float, float, int]:
    """Decreasing order: whole GPUs, then shares, then CPUs, then memory; gangs before single
    jobs of their size (their parts need distinct daemons: the freest choice goes to them)."""
    request = demand.request
    return (
        shape.wanted(request),
        float(request.get("cpus") or 0),
        float(request.get("memory_gb") or 0),
        demand.nodes,
    )


def pack(
    demands: Sequence[Demand], shape: Shape, *, slots: int, limit: int | None = None
) -> Packing:
    """First-fit decreasing of `demands` onto daemons of `shape` running `slots` jobs each."""
    packer = _Packer(shape, max(1, slots))
    jobs = unfit = 0
    gpus = 0.0
    capped = False
    for demand in sorted(demands, key=lambda d: _size(shape, d), reverse=True):
        if demand.count <= 0:
            continue
        if not shape.could_run(demand.request):
            unfit += demand.count
            continue
        jobs += demand.count
        gpus += demand.count * demand.nodes * shape.wanted(demand.request)
        place = _place_gang if demand.nodes > 1 else _place
        if not place(packer, demand, limit):
            capped = True
    return Packing(len(packer.daemons), jobs, unfit, gpus, capped)


def _place(packer: _Packer, demand: Demand, limit: int | None) -> bool:
    """Place `demand`'s jobs in the first daemons with room, opening new ones as needed;
    False: stopped at `limit` with jobs left."""
    left = demand.count
    for d in packer.daemons:
        n = min(left, packer.room_for(d, demand.request))
        if n:
            packer.take(d, demand.request, n)
            left -= n
        if not left:
            return True
    while left:
        if limit is not None and len(packer.daemons) >= limit:
            return False
        d = packer.new()
        n = min(left, packer.room_for(d, demand.request))
        if n <= 0:  # could_run said yes: a shape of 0 slots cannot happen; never loop
            raise AssertionError(f"{describe(demand.request)} fits no empty {packer.shape}")
        packer.take(d, demand.request, n)
        left -= n
    return True


def _place_gang(packer: _Packer, demand: Demand, limit: int | None) -> bool:
    """Place each gang's `nodes` parts on as many different daemons, first fit; False: stopped
    at `limit` with parts left (one gang at a time, so a capped packing ends within `limit`
    daemons' worth of gangs, not `count`'s)."""
    for _ in range(demand.count):
        used: set[int] = set()
        for i, d in enumerate(packer.daemons):
            if len(used) == demand.nodes:
                break
            if packer.room_for(d, demand.request) > 0:
                packer.take(d, demand.request, 1)
                used.add(i)
        while len(used) < demand.nodes:
            if limit is not None and len(packer.daemons) >= limit:
                return False
            packer.take(packer.new(), demand.request, 1)
            used.add(len(packer.daemons) - 1)
    return True
