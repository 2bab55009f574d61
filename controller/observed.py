"""A provider whose every call is timed and its failures counted: what the controller's
metrics (controller/metrics.py) hear of each launch, terminate and list."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from dreamlake.lakeshore.plane.providers import ProviderInfo
from dreamlake.lakeshore.providers.base import Instance, LaunchSpec, Provider, shape_of
from dreamlake.lakeshore.shapes import Shape

if TYPE_CHECKING:
    from dreamlake.lakeshore.controller.decision import Observer

T = TypeVar("T")


class ObservedProvider:
    """A provider whose every call is timed and its failures counted by an `Observer`."""

    def __init__(self, inner: Provider, info: ProviderInfo, observer: Observer) -> None:
        self.inner = inner
        self.name = inner.name
        self._info = info
        self._observer = observer

    def launch(self, spec: LaunchSpec, count: int) -> list[Instance]:
        return self._timed("launch", lambda: self.inner.launch(spec, count))

    def terminate(self, ids: Sequence[str]) -> None:
        self._timed("terminate", lambda: self.inner.terminate(ids))

    def list(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
        return self._timed("list", lambda: self.inner.list(tags))

    def launch_shape(self, settings: Mapping[str, Any]) -> Shape | None:
        return shape_of(self.inner, self._info.kind, settings)

    def _timed(self, call: str, run: Callable[[], T]) -> T:
        began = time.monotonic()
        try:
            value = run()
        except BaseException as exc:
            self._observer.provider_call(self._info, call, time.monotonic() - began, exc)
            raise
        self._observer.provider_call(self._info, call, time.monotonic() - began, None)
        return value
