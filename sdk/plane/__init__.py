"""Dispatch planes: where invocations live. See `base.Plane` for the contract.

`HttpDispatch` is imported on first use: httpx (with the command line it loads when click and
rich are installed) costs more than the rest of the SDK, and an embedded producer never needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import Plane
from .default import default_plane, reset_default_plane
from .dispatch import Dispatch

if TYPE_CHECKING:
    from .http import HttpDispatch

__all__ = ["Dispatch", "HttpDispatch", "Plane", "default_plane", "reset_default_plane"]


def __getattr__(name: str) -> Any:
    if name == "HttpDispatch":
        from .http import HttpDispatch

        return HttpDispatch
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
