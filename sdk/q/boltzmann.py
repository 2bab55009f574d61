"""Lazy Boltzmann-queue handles: `from dreamlake.lakeshore.q.boltzmann import rollouts`.

Each attribute is a `BoltzmannQueue` at temperature 1.0; for another temperature or an anneal
schedule construct `BoltzmannQueue(name, temperature=..., anneal=...)`. See
`dreamlake.lakeshore.q`.
"""

from dreamlake.lakeshore.queue import BoltzmannQueue as _BoltzmannQueue

from . import _handle

_handles: dict[str, _BoltzmannQueue] = {}


def __getattr__(attr: str) -> _BoltzmannQueue:
    return _handle(_handles, __name__, attr, _BoltzmannQueue)
