"""The provider seam: launch daemons somewhere, terminate them, list what we launched.

One small Protocol (`launch`, `terminate`, `list`) is all the controller and `lakeshore daemon
launch` need from a place that runs daemons; everything about that place (processes, VMs, spot)
stays in its plugin. A provider keeps no memory the controller depends on: every instance
carries its tags (namespace, target, daemon name, launch-config hash), and `list()` finds them by
those tags again, so a restarted controller knows its fleet.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from dreamlake.lakeshore.shapes import Shape, launch_shape

#: Tag keys on every instance. EC2 allows ':' in keys; "aws:" is the only reserved prefix.
TAG_NAMESPACE = "lakeshore:namespace"
TAG_TARGET = (
    "lakeshore:target"  # "queue/<name>" or "pool/<name>" for the controller's, "cli/<name>"
)
TAG_QUEUE = "lakeshore:queue"  # the primary queue
TAG_DAEMON = "lakeshore:daemon"  # the worker name the daemon registers with
TAG_GROUP = "lakeshore:group"  # `daemon launch --name NAME`: NAME
TAG_SPEC = "lakeshore:spec"  # launch-config hash: outdated instances are the first to go
TAG_OWNER = "lakeshore:owner"  # "controller" or "cli"
TAG_PROVIDER = "lakeshore:provider"
#: Set by a provider on an instance before it terminates it when asked: an instance that ended
#: without it was taken back (a spot interruption) or ended by someone else.
TAG_ENDED_BY = "lakeshore:ended-by"


class ProviderError(Exception):
    """A provider could not do what was asked (bad config, cloud refused); the message says why."""


@dataclass(frozen=True)
class LaunchSpec:
    """What to start: daemons for `queues` (primary first), named `names` or `name`-00, -01, ...

    `settings` is the provider config with the queue policy's `match` laid over it (instance
    type, labels, ...); `plane_url` / `plane_token` are how the daemons reach the plane.
    """

    namespace: str
    queues: tuple[str, ...]
    name: str
    target: str
    owner: str = "controller"
    names: tuple[str, ...] = ()
    settings: Mapping[str, Any] = field(default_factory=dict)
    plane_url: str | None = None
    plane_token: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Launch on-demand even where `settings` ask for spot: the controller's fallback after
    #: `spot_fallback_after` reclaims. Not part of `config_hash`: the same config on another
    #: market, so these instances are not rolled as outdated.
    on_demand: bool = False

    def daemon_names(self, count: int) -> list[str]:
        if self.names:
            if len(self.names) != count:
                raise ProviderError(f"{len(self.names)} names given for {count} daemons")
            return list(self.names)
        return [f"{self.name}-{i:02d}" for i in range(count)]

    @property
    def config_hash(self) -> str:
        """Changes when what a new daemon would be launched with changes (not its name, nor which
        of a pool's queues is its primary: that is picked per launch, by demand)."""
        basis = {"queues": sorted(self.queues), "settings": self.settings, "labels": self.labels}
        text = json.dumps(basis, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def tags(self, daemon: str, provider: str) -> dict[str, str]:
        return {
            TAG_NAMESPACE: self.namespace,
            TAG_TARGET: self.target,
            TAG_QUEUE: self.queues[0] if self.queues else "default",
            TAG_DAEMON: daemon,
            TAG_GROUP: self.name,
            TAG_SPEC: self.config_hash,
            TAG_OWNER: self.owner,
            TAG_PROVIDER: provider,
        }


@dataclass(frozen=True)
class Instance:
    """One launched daemon host (a process, a VM) as the provider sees it."""

    id: str
    tags: Mapping[str, str]
    launched_at: float
    #: pending | running | terminating | reclaimed: ended or stopped without being asked to
    #: (a spot interruption, a host failure, someone else's hand); the controller replaces it.
    state: str = "running"
    #: Why a reclaimed instance ended, in the provider's words.
    reason: str = ""
    #: Why a pending instance waits, as its provider says it (Slurm's reason: "Resources").
    note: str = ""

    @property
    def daemon(self) -> str:
        return self.tags.get(TAG_DAEMON, "")

    @property
    def namespace(self) -> str:
        return self.tags.get(TAG_NAMESPACE, "")

    @property
    def target(self) -> str:
        return self.tags.get(TAG_TARGET, "")


@runtime_checkable
class Provider(Protocol):
    """Built by its plugin factory as `factory(name, config)`; see `registry.py`.

    A provider may also answer `launch_shape(settings) -> Shape | None` (what each launch
    offers, `shape_of`); one that does not is sized on its config's `shape` and the tables."""

    name: str

    def launch(self, spec: LaunchSpec, count: int) -> list[Instance]:
        """Start `count` daemons; returns their instances (pending until they boot)."""

    def terminate(self, ids: Sequence[str]) -> None:
        """Stop these instances; ids this provider no longer knows are ignored."""

    def list(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
        """Live instances this provider launched whose tags include all of `tags`, and those
        reclaimed (state `reclaimed`) while the provider still knows of them."""


def shape_of(provider: object, kind: str, settings: Mapping[str, Any]) -> Shape | None:
    """What each launch of `provider` with `settings` (config and `match` merged) offers: the
    provider's own answer where it has one (`launch_shape(settings)`: EC2 asks the cloud about
    its instance type), else what the config and the built-in tables say (sdk/shapes.py)."""
    own = getattr(provider, "launch_shape", None)
    if callable(own):
        found = own(settings)
        return found if isinstance(found, Shape) or found is None else None
    return launch_shape(kind, settings)


def matches(instance_tags: Mapping[str, str], wanted: Mapping[str, str] | None) -> bool:
    return not wanted or all(instance_tags.get(k) == v for k, v in wanted.items())


def merged_settings(config: Mapping[str, Any], match: Mapping[str, Any]) -> dict[str, Any]:
    """The provider config with a policy's `match` laid over it; `labels` merge key by key."""
    out = {**config, **{k: v for k, v in match.items() if k != "labels"}}
    labels = {**dict(config.get("labels") or {}), **dict(match.get("labels") or {})}
    if labels:
        out["labels"] = labels
    return out
