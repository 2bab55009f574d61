"""What a tick changes: launches, drains, terminations and the events that say why.

The loop (loop.py) observes the fleet and decides a size per target; everything here is what
follows from a decision, and the only part of the controller that calls a provider to start or
stop machines or writes to the store. Kept apart so that deciding stays a read of the
snapshot and the controller's memory, and acting a short list of side effects to audit.
`Controller` inherits these methods, as `SqlStore` combines its mixins.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
from typing import Any

from dreamlake.lakeshore.logs import EventLog
from dreamlake.lakeshore.plane.providers import ProviderInfo
from dreamlake.lakeshore.providers.base import Instance, LaunchSpec, Provider, merged_settings

from .decision import Decision, Observer
from .fleet import Fleet, Target, pick_primaries
from .observe import FleetSource, Snapshot
from .observed import ObservedProvider
from .policy import step, surge_limit
from .settings import Memory, ProviderFactory, Settings

log = EventLog("lakeshore.controller")


class Acting:
    """The controller's side effects, on the state `Controller` holds."""

    store: FleetSource
    settings: Settings
    _mem: Memory
    _factory: ProviderFactory
    _observer: Observer | None
    _providers: dict[tuple[str, str, str], Provider]

    # -- acting on one target -------------------------------------------------------------------

    def _act(
        self,
        snap: Snapshot,
        t: Target,
        fleet: Fleet,
        desired: int,
        reason: str,
        budget: int | None,
        events: list[tuple[str, str, str, dict[str, Any]]],
    ) -> tuple[Decision, int | None]:
        now = snap.at
        surge = max(
            t.widest_gang, surge_limit(fleet.current, upscaling_speed=self.settings.upscaling_speed)
        )
        plan = step(fleet.current, desired, len(fleet.idle), surge)
        launch = plan.launch if budget is None else max(0, min(plan.launch, budget))
        detail = {
            "target": t.key,
            "desired": desired,
            "current": fleet.current,
            "booting": len(fleet.booting),
            "draining": len(fleet.draining),
            "backlog": t.backlog,
            "running": t.running,
            "reason": reason,
        }
        if t.shape is not None and t.packing is not None:  # sized in GPUs, not jobs
            detail["shape"] = t.shape.as_dict()
            detail["gpus_asked"] = t.packing.gpus
        if fleet.reclaimed:
            self._reclaimed(snap, t, fleet.reclaimed, detail, events)
        launched = 0
        if launch:
            launched = self._launch(snap, t, fleet, launch, detail, events)
            if budget is not None:
                budget -= launched
        drained = []
        if not (plan.drain or launch or fleet.draining) and fleet.outdated:
            plan = dataclasses.replace(plan, drain=1)  # roll one: its replacement comes next tick
            reason += "; rolling an instance launched with an older config"
            detail["reason"] = reason
        for inst, row in fleet.idle[: plan.drain]:
            self.store.set_worker_state(row.namespace, row.id, "draining")
            self._mem.drained_at[inst.id] = now
            self._mem.drained[inst.id] = (t, row.name)
            drained.append(row.name)
        if drained:
            self._event(events, t, "scaled", {**detail, "direction": "down", "drain": drained})
        doomed = fleet.terminate
        if doomed:
            self._terminate(snap, t, doomed, detail, events)
        if not (launched or drained or doomed):
            self._maybe_desired_event(events, t, detail)
        decision = Decision(
            namespace=t.namespace,
            target=t.key,
            queues=tuple(t.queues),
            desired=desired,
            current=fleet.current,
            launch=launched,
            drain=len(drained),
            terminate=len(doomed),
            reason=reason,
        )
        return decision, budget

    def _launch(
        self,
        snap: Snapshot,
        t: Target,
        fleet: Fleet,
        count: int,
        detail: dict[str, Any],
        events: list[tuple[str, str, str, dict[str, Any]]],
    ) -> int:
        info = snap.providers.get((t.namespace, t.policy.provider or ""))
        if info is None:
            why = (
                f"no provider config named '{t.policy.provider}' in namespace '{t.namespace}'"
                if t.policy.provider
                else "elasticity.provider is not set"
            )
            self._maybe_error(events, t, {**detail, "error": why})
            return 0
        provider = self._provider(info)
        settings = merged_settings(info.config, t.policy.match)
        primaries = pick_primaries(t, fleet, count)
        hkey = f"{t.namespace}/{t.key}"
        on_demand, switched = self._mem.reclaims.market_for(hkey, settings, snap.at)
        if switched is not None:
            self._event(events, t, "spot_fallback", {**detail, **switched})
        base = t.key.split("/", 1)[1][:100]
        launched: list[str] = []
        try:
            for primary in dict.fromkeys(primaries):
                n = primaries.count(primary)
                names = tuple(f"{base}-{secrets.token_hex(3)}" for _ in range(n))
                spec = LaunchSpec(
                    namespace=t.namespace,
                    queues=(primary, *[q for q in t.queues if q != primary]),
                    name=base,
                    names=names,
                    target=t.key,
                    settings=settings,
                    plane_url=self.settings.plane_url,
                    plane_token=self.settings.plane_token,
                    on_demand=on_demand,
                )
                started = provider.launch(spec, n)
                self._mem.sightings.add(started, t, info.name)
                launched += [i.daemon for i in started]
        except Exception as exc:
            log.warning(
                "provider.call_failed",
                namespace=t.namespace,
                provider=info.name,
                call="launch",
                error=str(exc),
            )
            self._maybe_error(events, t, {**detail, "error": f"launch failed: {exc}"})
        if launched:
            self._event(events, t, "scaled", {**detail, "direction": "up", "launch": launched})
        return len(launched)

    def _note_drained_exits(
        self,
        instances: list[Instance],
        broken: set[tuple[str, str | None]],
        events: list[tuple[str, str, str, dict[str, Any]]],
    ) -> None:
        """A drained daemon usually exits before a tick terminates its instance: record that end
        too, so every scale-down is followed by a `terminated` event whichever side finished."""
        live = {i.id for i in instances}
        for inst_id, (t, daemon) in list(self._mem.drained.items()):
            if inst_id in live or (t.namespace, t.policy.provider) in broken:
                continue
            del self._mem.drained[inst_id]
            self._mem.drained_at.pop(inst_id, None)
            self._mem.idle_since.pop(inst_id, None)
            detail = {
                "target": t.key,
                "instance": inst_id,
                "daemon": daemon,
                "reason": "the daemon exited after its drain",
            }
            events.extend((t.namespace, q, "terminated", detail) for q in t.queues)

    def _note_vanished(
        self,
        snap: Snapshot,
        instances: list[Instance],
        found: dict[tuple[str, str], Target],
        broken: set[tuple[str, str | None]],
        events: list[tuple[str, str, str, dict[str, Any]]],
    ) -> None:
        """An instance gone from its provider's listing took its daemon with it: a row still
        `alive` is marked gone now, not a heartbeat timeout later, and an end the controller
        did not cause (a Slurm job cancelled, preempted or timed out) is a `terminated` event."""
        listed = snap.providers.keys() - broken
        for inst_id, seen, ours in self._mem.sightings.update(instances, found, listed):
            t = seen.target
            row = snap.workers.get((t.namespace, seen.daemon))
            if row is not None and row.state != "gone":
                self.store.set_worker_state(t.namespace, row.id, "gone")
            if ours or inst_id in self._mem.drained:
                continue  # recorded when terminated, or by _note_drained_exits
            detail = {
                "target": t.key,
                "instance": inst_id,
                "daemon": seen.daemon,
                "reason": f"vanished: provider {seen.provider} no longer lists it"
                + ("; its worker row marked gone" if row is not None else ""),
            }
            events.extend((t.namespace, q, "terminated", detail) for q in t.queues)

    def _reclaimed(
        self,
        snap: Snapshot,
        t: Target,
        reclaimed: list[Instance],
        detail: dict[str, Any],
        events: list[tuple[str, str, str, dict[str, Any]]],
    ) -> None:
        """Record each reclaim once and count it; terminate what the provider still holds
        (a stopped VM; on one already ended, a no-op that marks its end as seen)."""
        hkey = f"{t.namespace}/{t.key}"
        for inst in reclaimed:
            if self._mem.reclaims.first_seen(hkey, inst, snap.at):
                log.warning(
                    "controller.reclaimed", target=t.key, instance=inst.id, reason=inst.reason
                )
                self._event(
                    events,
                    t,
                    "reclaimed",
                    {**detail, "instance": inst.id, "daemon": inst.daemon, "why": inst.reason},
                )
        by_provider: dict[str, list[str]] = {}
        for inst in reclaimed:
            by_provider.setdefault(inst.tags.get("lakeshore:provider", ""), []).append(inst.id)
        for name, ids in by_provider.items():
            info = snap.providers.get((t.namespace, name))
            if info is None:
                continue
            try:
                self._provider(info).terminate(ids)
            except Exception as exc:
                log.warning(
                    "provider.call_failed",
                    namespace=t.namespace,
                    provider=name,
                    call="terminate",
                    error=str(exc),
                )

    def _terminate(
        self,
        snap: Snapshot,
        t: Target,
        doomed: list[tuple[Instance, str]],
        detail: dict[str, Any],
        events: list[tuple[str, str, str, dict[str, Any]]],
    ) -> None:
        by_provider: dict[str, list[tuple[Instance, str]]] = {}
        for inst, why in doomed:
            by_provider.setdefault(inst.tags.get("lakeshore:provider", ""), []).append((inst, why))
        for name, items in by_provider.items():
            info = snap.providers.get((t.namespace, name))
            if info is None:
                continue
            try:
                self._provider(info).terminate([i.id for i, _ in items])
            except Exception as exc:
                log.warning(
                    "provider.call_failed",
                    namespace=t.namespace,
                    provider=name,
                    call="terminate",
                    error=str(exc),
                )
                self._maybe_error(events, t, {**detail, "error": f"terminate failed: {exc}"})
                continue
            for inst, why in items:
                self._mem.sightings.ended_here.add(inst.id)
                self._mem.drained_at.pop(inst.id, None)
                self._mem.drained.pop(inst.id, None)
                self._mem.idle_since.pop(inst.id, None)
                self._event(
                    events,
                    t,
                    "terminated",
                    {**detail, "instance": inst.id, "daemon": inst.daemon, "reason": why},
                )

    # -- providers ----------------------------------------------------------------------------

    def _provider(self, info: ProviderInfo) -> Provider:
        key = (info.namespace, info.name, info.kind + json.dumps(info.config, sort_keys=True))
        if key not in self._providers:
            provider = self._factory(info)
            if self._observer is not None:
                provider = ObservedProvider(provider, info, self._observer)
            self._providers[key] = provider
        return self._providers[key]

    # -- events -------------------------------------------------------------------------------

    def _event(
        self,
        events: list[tuple[str, str, str, dict[str, Any]]],
        t: Target,
        kind: str,
        detail: dict[str, Any],
    ) -> None:
        for q in t.queues:
            events.append((t.namespace, q, kind, detail))
        self._mem.last_desired[f"{t.namespace}/{t.key}"] = detail["desired"]

    def _maybe_desired_event(
        self, events: list[tuple[str, str, str, dict[str, Any]]], t: Target, detail: dict[str, Any]
    ) -> None:
        """A changed desired size is worth an event even when nothing acted (a hold, a cap)."""
        key = f"{t.namespace}/{t.key}"
        last = self._mem.last_desired.get(key)
        if last is None and detail["desired"] == 0 and detail["current"] == 0:
            return  # an idle queue seen for the first time: nothing to say
        if last != detail["desired"]:
            self._event(events, t, "desired", detail)

    def _maybe_error(
        self, events: list[tuple[str, str, str, dict[str, Any]]], t: Target, detail: dict[str, Any]
    ) -> None:
        key = f"{t.namespace}/{t.key}"
        if self._mem.last_error.get(key) != detail["error"]:
            self._event(events, t, "scale_error", detail)
            self._mem.last_error[key] = detail["error"]

    def _record(self, events: list[tuple[str, str, str, dict[str, Any]]], now: float) -> None:
        """All of a tick's events in one transaction."""
        if events:
            self.store.record_events(events, now)
