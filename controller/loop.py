"""The controller: each tick observes, decides per target, acts through providers, and says why.

    Controller(store, Settings(...)).tick()   # one pass; `run()` loops it under leader election

A tick never blocks on a daemon: scaling down marks worker rows `draining` (the daemon finishes
and exits) and a later tick terminates the instance once its daemon has left. Every decision
that changes something, and every change of the desired size, is a queue event on each member
queue (`scaled`, `terminated`, `scale_error`, `desired`), with the reason in its detail.

This module observes and decides; what a decision changes (launch, drain, terminate, the events)
is in act.py, which `Controller` inherits.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from dreamlake.lakeshore.logs import EventLog
from dreamlake.lakeshore.plane.leader import Leader
from dreamlake.lakeshore.plane.providers import ProviderInfo
from dreamlake.lakeshore.providers import registry
from dreamlake.lakeshore.providers.base import (
    TAG_NAMESPACE,
    TAG_OWNER,
    Instance,
    LaunchSpec,
    Provider,
    merged_settings,
    shape_of,
)
from dreamlake.lakeshore.shapes import launch_shape

from .act import Acting
from .decision import Decision, Observer
from .fleet import Fleet, Target, Timeouts, classify, targets
from .observe import FleetSource, Snapshot, observe
from .packing import pack
from .policy import Policy, Want, apply_cap, desired_workers, stabilized
from .settings import Memory, ProviderFactory
from .settings import Settings as Settings  # callers import it from here, its first home

log = EventLog("lakeshore.controller")

T = TypeVar("T")


def build_provider(info: ProviderInfo) -> Provider:
    return registry.build(info.kind, info.name, info.config)


class Controller(Acting):
    def __init__(
        self,
        store: FleetSource,
        settings: Settings | None = None,
        *,
        provider_factory: ProviderFactory = build_provider,
        clock: Callable[[], float] = time.time,
        observer: Observer | None = None,
    ) -> None:
        self.store = store
        self.settings = settings or Settings()
        self._factory = provider_factory
        self._observer = observer
        self._clock = clock
        self._providers: dict[tuple[str, str, str], Provider] = {}
        self._mem = Memory()
        self._started = clock()

    # -- one tick -----------------------------------------------------------------------------

    def tick(self) -> list[Decision]:
        """One pass: observe, decide, act; the decisions (the observer hears of it, failed too)."""
        began = time.monotonic()
        try:
            decisions = self._tick()
        except BaseException as exc:
            if self._observer is not None:
                self._observer.tick_ended([], time.monotonic() - began, exc)
            raise
        for d in decisions:
            if d.launch or d.drain or d.terminate:
                log.info("controller.decision", **dataclasses.asdict(d))
        if self._observer is not None:
            self._observer.tick_ended(decisions, time.monotonic() - began, None)
        return decisions

    def _tick(self) -> list[Decision]:
        now = self._clock()
        snap = observe(self.store, now)
        found = targets(snap)
        instances, broken = self._list_instances(snap, found)
        by_target: dict[tuple[str, str], list[Instance]] = {}
        for inst in instances:
            by_target.setdefault((inst.namespace, inst.target), []).append(inst)
        for key in by_target.keys() - found.keys():  # a queue deleted, renamed, set to none
            t = Target(
                key[0], key[1], [], _gone_policy(), note="target no longer exists", orphaned=True
            )
            found[key] = t
        timeouts = Timeouts(
            self.settings.boot_timeout_s,
            self.settings.stale_s,
            self.settings.drain_timeout_s,
            self.settings.reclaim_grace_s,
        )
        fleets: dict[tuple[str, str], Fleet] = {}
        raw: dict[tuple[str, str], tuple[int, str]] = {}
        for key, t in found.items():
            if (t.namespace, t.policy.provider) in broken:
                continue  # cannot see the fleet: do not act blind
            fleet = classify(
                by_target.get(key, []),
                snap.workers,
                now=now,
                timeouts=timeouts,
                drained_at=self._mem.drained_at,
                spec_hash=self._spec_hash(snap, t),
                idle_since=self._mem.idle_since,
                served_at=self._mem.served_at,
            )
            self._track_idle(fleet, now)
            fleets[key] = fleet
            self._pack(snap, t)
            raw[key] = self._recommend(key, t, fleet, now)
        capped = apply_cap(
            [Want(f"{k[0]}/{k[1]}", v[0], found[k].policy.cost_weight) for k, v in raw.items()],
            self.settings.max_workers,
        )
        budget = None
        if self.settings.max_workers is not None:
            budget = self.settings.max_workers - sum(f.current for f in fleets.values())
        decisions = []
        events: list[tuple[str, str, str, dict[str, Any]]] = []
        self._note_vanished(snap, instances, found, broken, events)  # before the drained go
        self._note_drained_exits(instances, broken, events)
        self._forget_unlisted(instances, broken, now)
        for key in sorted(fleets):
            t, fleet = found[key], fleets[key]
            desired, reason = raw[key]
            final = capped[f"{key[0]}/{key[1]}"]
            if final < desired:
                reason += f"; global cap --max-workers={self.settings.max_workers}: {final}"
            d, budget = self._act(snap, t, fleet, final, reason, budget, events)
            decisions.append(d)
        self._record(events, now)
        return decisions

    def _spec_hash(self, snap: Snapshot, t: Target) -> str | None:
        """The launch config a new instance of `t` would get now (None: no provider to ask)."""
        info = snap.providers.get((t.namespace, t.policy.provider or ""))
        if info is None or t.orphaned:
            return None
        return LaunchSpec(
            namespace=t.namespace,
            queues=tuple(t.queues),
            name="",
            target=t.key,
            settings=merged_settings(info.config, t.policy.match),
        ).config_hash

    def _pack(self, snap: Snapshot, t: Target) -> None:
        """Size `t` in daemons of its provider's launch shape, when the shape is known: the
        requests of its queued and running jobs, first-fit decreasing (controller/packing.py)."""
        info = snap.providers.get((t.namespace, t.policy.provider or ""))
        if info is None or t.orphaned or not t.policy.managed:
            return
        settings = merged_settings(info.config, t.policy.match)
        try:
            shape = shape_of(self._provider(info), info.kind, settings)
        except Exception as exc:  # the cloud's answer is a nicety: the tables still say
            log.warning("provider.shape_failed", provider=info.name, error=str(exc))
            shape = launch_shape(info.kind, settings)
        if shape is None:
            return
        t.shape = shape
        t.packing = pack(
            t.requests,
            shape,
            slots=shape.slots(settings.get("concurrency")),
            limit=max(1, t.policy.max, t.policy.min),
        )

    def _recommend(
        self, key: tuple[str, str], t: Target, fleet: Fleet, now: float
    ) -> tuple[int, str]:
        hkey = f"{key[0]}/{key[1]}"
        if t.demand > 0:
            self._mem.quiet_since.pop(hkey, None)
            quiet_s = 0.0
        else:  # quiet since first seen quiet (after a restart: since the restart)
            quiet_s = now - self._mem.quiet_since.setdefault(hkey, now)
        packed = None
        if t.packing is not None and t.shape is not None:
            packed = (t.packing.daemons, t.packing.words(t.shape))
        desired, reason = desired_workers(
            t.policy, t.demand, fleet.current, quiet_s, packed=packed, gang=t.widest_gang
        )
        if t.note:
            reason = f"{reason} ({t.note})"
        window = (
            t.policy.idle_s
            if t.policy.kind == "fully_elastic"
            else self.settings.scale_down_window_s
        )
        history = self._mem.history.setdefault(hkey, deque())
        while history and now - history[0][0] > window:
            history.popleft()
        recent = [v for _, v in history]
        history.append((now, desired))
        if t.orphaned:
            return 0, reason  # ours, but nobody's: no damping
        if t.policy.kind == "fully_elastic" and desired == 0:
            return 0, reason  # the quiet time (idle_s) was the stabilisation
        final = stabilized(
            desired, fleet.current, recent, watched_whole_window=now - self._started >= window
        )
        if final > desired:
            reason += f"; scale-down stabilising ({window:g}s window): hold {final}"
        return final, reason

    # -- providers ----------------------------------------------------------------------------

    def _list_instances(
        self, snap: Snapshot, found: dict[tuple[str, str], Target]
    ) -> tuple[list[Instance], set[tuple[str, str | None]]]:
        """Our instances in every namespace that has provider configs; and configs that failed.

        Every config of a namespace is listed, not only those named by a policy now: instances
        of a policy changed away from a provider are still ours to drain.
        """
        out: list[Instance] = []
        broken: set[tuple[str, str | None]] = set()
        for (ns, name), info in sorted(snap.providers.items()):
            try:
                found_here = self._provider(info).list({TAG_NAMESPACE: ns, TAG_OWNER: "controller"})
            except Exception as exc:
                log.warning(
                    "provider.call_failed", namespace=ns, provider=name, call="list", error=str(exc)
                )
                broken.add((ns, name))
                continue
            out += found_here
        return out, broken

    # -- memory -------------------------------------------------------------------------------

    def _track_idle(self, fleet: Fleet, now: float) -> None:
        for inst, _ in fleet.idle:
            self._mem.idle_since.setdefault(inst.id, now)
        for inst, _ in fleet.busy:
            self._mem.idle_since.pop(inst.id, None)
        for inst, _ in [*fleet.idle, *fleet.busy, *fleet.draining]:
            self._mem.served_at[inst.id] = now

    def _forget_unlisted(
        self, instances: list[Instance], broken: set[tuple[str, str | None]], now: float
    ) -> None:
        """Instances the providers no longer list need no memory (unless a listing failed)."""
        self._mem.reclaims.forget_before(now)
        if broken:
            return
        live = {i.id for i in instances}
        for inst_id in self._mem.served_at.keys() - live:
            del self._mem.served_at[inst_id]

    # -- the loop -----------------------------------------------------------------------------

    def run(self, stop: threading.Event, leader: Leader | None = None) -> None:
        """Tick every interval while leading; a standby re-tries the lock each interval."""
        leading = False
        while not stop.is_set():
            if self._lead(leader):
                if not leading:
                    log.info("controller.leading")
                    leading = True
                    self._tell_leading(True)
                try:
                    self.tick()
                except Exception:  # a failed tick is retried next interval
                    log.exception("controller.tick_failed")
            elif leading:
                log.warning("controller.standby", reason="lost the leadership")
                leading = False
                self._tell_leading(False)
            stop.wait(self.settings.interval_s)

    def _tell_leading(self, leading: bool) -> None:
        if self._observer is not None:
            self._observer.leading(leading)

    @staticmethod
    def _lead(leader: Leader | None) -> bool:
        """Whether to act this tick; a plane that cannot be asked (a server away) means no."""
        if leader is None:
            return True
        try:
            return leader.try_acquire()
        except Exception:
            log.exception("controller.leader_error", reason="could not renew the leadership")
            return False


def _gone_policy() -> Policy:
    return Policy(kind="fixed", max=0)
