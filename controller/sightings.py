"""Instances seen on earlier ticks, to notice those that ended behind the controller's back.

A Slurm job cancelled by an operator, preempted or past its time limit, a VM stopped in the
console, a local daemon killed: the provider stops listing the instance, and its daemon's
worker row may still read `alive` until its heartbeat goes stale. The controller compares each
tick's listing with the last one and marks such a row gone at once (controller/act.py). An
instance whose provider could not be listed this tick, or whose provider config is gone, has
not vanished: nobody can tell.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from dreamlake.lakeshore.providers.base import TAG_PROVIDER, Instance

from .fleet import Target


@dataclass(frozen=True)
class Seen:
    target: Target
    daemon: str
    provider: str


@dataclass
class Sightings:
    seen: dict[str, Seen] = field(default_factory=dict)
    #: Ids the controller terminated itself: their end is recorded already.
    ended_here: set[str] = field(default_factory=set)

    def add(self, instances: Iterable[Instance], target: Target, provider: str) -> None:
        """Just launched: seen, though no listing has shown them yet."""
        for inst in instances:
            self.seen[inst.id] = Seen(target, inst.daemon, provider)

    def update(
        self,
        instances: Iterable[Instance],
        targets: dict[tuple[str, str], Target],
        listed: Collection[tuple[str, str]],
    ) -> list[tuple[str, Seen, bool]]:
        """Remember this tick's instances; returns (id, what was seen, ended by us) for each
        one seen before that its provider, listed this tick, no longer lists."""
        live = set()
        for inst in instances:
            live.add(inst.id)
            t = targets.get((inst.namespace, inst.target))
            if t is not None:
                self.seen[inst.id] = Seen(t, inst.daemon, inst.tags.get(TAG_PROVIDER, ""))
        gone = []
        for inst_id, seen in list(self.seen.items()):
            if inst_id in live or (seen.target.namespace, seen.provider) not in listed:
                continue
            del self.seen[inst_id]
            gone.append((inst_id, seen, inst_id in self.ended_here))
            self.ended_here.discard(inst_id)
        return gone
