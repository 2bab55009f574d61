"""What a tick decided for one target, and who hears of ticks and provider calls.

Below loop.py, act.py and observed.py, which all speak of both, and import none of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from dreamlake.lakeshore.plane.providers import ProviderInfo


@dataclass(frozen=True)
class Decision:
    namespace: str
    target: str
    queues: tuple[str, ...]
    desired: int
    current: int
    launch: int = 0
    drain: int = 0
    terminate: int = 0
    reason: str = ""


class Observer(Protocol):
    """Who hears of ticks, leadership and provider calls: the metrics (controller/metrics.py),
    kept behind this protocol so that the loop imports no metrics library."""

    def tick_ended(
        self, decisions: Sequence[Decision], seconds: float, error: BaseException | None
    ) -> None: ...

    def leading(self, leading: bool) -> None: ...

    def provider_call(
        self, info: ProviderInfo, call: str, seconds: float, error: BaseException | None
    ) -> None: ...
