"""A provider that starts nothing and records everything: the controller's tests run on it.

Shipped in the package (as dramatiq ships `StubBroker`), so a test of scaling arithmetic needs
no processes and no cloud: `launch` returns instances at once and remembers the call, and a test
plays the daemons by registering worker rows itself (`FakeProvider.register_all`).
"""

from __future__ import annotations

import builtins
import itertools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .base import Instance, LaunchSpec, matches


@dataclass(frozen=True)
class Call:
    verb: str  # launch | terminate
    spec: LaunchSpec | None
    ids: tuple[str, ...]


class FakeProvider:
    def __init__(
        self,
        name: str = "fake",
        config: Mapping[str, Any] | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self.clock = clock
        self.config = dict(config or {})
        self.calls: list[Call] = []
        self.instances: dict[str, Instance] = {}
        self.specs: dict[str, LaunchSpec] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        #: Set to make the next launches fail (a cloud out of capacity).
        self.fail_launch: Exception | None = None

    def launch(self, spec: LaunchSpec, count: int) -> list[Instance]:
        with self._lock:
            if self.fail_launch is not None:
                raise self.fail_launch
            now = self.clock()
            out = []
            for daemon in spec.daemon_names(count):
                inst = Instance(
                    id=f"fake-{next(self._ids)}",
                    tags=spec.tags(daemon, self.name),
                    launched_at=now,
                    state="pending",
                )
                self.instances[inst.id] = inst
                self.specs[inst.id] = spec
                out.append(inst)
            self.calls.append(Call("launch", spec, tuple(i.id for i in out)))
            return out

    def terminate(self, ids: Sequence[str]) -> None:
        with self._lock:
            self.calls.append(Call("terminate", None, tuple(ids)))
            for i in ids:
                self.instances.pop(i, None)

    def list(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
        with self._lock:
            return [i for i in self.instances.values() if matches(i.tags, tags)]

    # -- for tests ----------------------------------------------------------------------------

    def launched(self) -> int:
        return sum(len(c.ids) for c in self.calls if c.verb == "launch")

    def terminated(self) -> builtins.list[str]:
        return [i for c in self.calls if c.verb == "terminate" for i in c.ids]

    def reclaim(self, ids: Sequence[str], reason: str = "spot interruption") -> None:
        """The cloud takes these back: listed as `reclaimed` until terminated."""
        with self._lock:
            for i in ids:
                self.instances[i] = replace(self.instances[i], state="reclaimed", reason=reason)

    def age(self, seconds: float) -> None:
        """Pretend every instance was launched `seconds` earlier (boot timeouts)."""
        with self._lock:
            self.instances = {
                k: replace(v, launched_at=v.launched_at - seconds)
                for k, v in self.instances.items()
            }

    def register_all(self, store: Any) -> builtins.list[str]:
        """Play the daemons: register a worker row (on a `SqlStore`) for each instance that
        has none yet; returns the names registered."""
        names = []
        for inst in self.list():
            spec = self.specs[inst.id]
            if inst.daemon not in {w.name for w in store.workers(spec.namespace)}:
                store.register_worker(spec.namespace, inst.daemon, queues=list(spec.queues))
                names.append(inst.daemon)
        return names
