"""Provider plugins by kind, from the `lakeshore.providers` entry-point group.

`[project.entry-points."lakeshore.providers"] local = "...:LocalProvider"`: a third party ships a
provider the same way, with no change here. Entry points are read when first asked for (never at
import), and a factory is `factory(name, config) -> Provider`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Any

from .base import Provider, ProviderError

GROUP = "lakeshore.providers"
Factory = Callable[[str, Mapping[str, Any]], Provider]

#: Registered in-process (tests, embedding): looked up before the entry points.
_EXTRA: dict[str, Factory] = {}


def register(kind: str, factory: Factory) -> None:
    _EXTRA[kind] = factory


def kinds() -> list[str]:
    return sorted({*_EXTRA, *(ep.name for ep in entry_points(group=GROUP))})


def factory_for(kind: str) -> Factory:
    if kind in _EXTRA:
        return _EXTRA[kind]
    for ep in entry_points(group=GROUP):
        if ep.name == kind:
            loaded: Factory = ep.load()
            return loaded
    raise ProviderError(
        f"unknown provider kind '{kind}'; installed: {', '.join(kinds()) or 'none'} "
        "(ec2 needs: pip install 'dreamlake-lakeshore[ec2]')"
    )


def build(kind: str, name: str, config: Mapping[str, Any]) -> Provider:
    return factory_for(kind)(name, config)
