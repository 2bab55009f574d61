"""Dispatch planes: where invocations live. See `base.Plane` for the contract.

`LocalPlane` (the seeds' `Dispatch`) and `HttpPlane` (the seeds' `HttpDispatch`) are imported on
first use: `LocalPlane` brings the SQL store and SQLite (a third of the SDK's import), `HttpPlane`
brings httpx (with the command line it
loads when click and rich are installed); a producer needs one of the two, and only once it
opens its plane. `default_plane()` opens whichever the environment names.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .base import Plane, claim
from .default import default_plane, reset_default_plane

if TYPE_CHECKING:
    from .dispatch import Dispatch, LocalPlane
    from .http import HttpDispatch, HttpPlane

__all__ = [
    "Dispatch",
    "HttpDispatch",
    "HttpPlane",
    "LocalPlane",
    "Plane",
    "claim",
    "default_plane",
    "reset_default_plane",
]

#: Name -> the module that defines it, imported at the first look-up.
_LAZY = {
    "Dispatch": ".dispatch",
    "LocalPlane": ".dispatch",
    "HttpDispatch": ".http",
    "HttpPlane": ".http",
}


def __getattr__(name: str) -> Any:
    try:
        module = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later look-ups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
