"""`HttpDispatch`: the plane as seen through a `lakeshore server` (placeholder until it lands)."""

from __future__ import annotations

from typing import Any

from ..errors import DispatchError


class HttpDispatch:
    def __init__(self, url: str, *, token: str | None = None, namespace: str | None = None) -> None:
        raise DispatchError(
            "HttpDispatch is not available yet in this build: unset LAKESHORE_URL to use the "
            "embedded SQLite plane"
        )

    def __getattr__(self, name: str) -> Any:  # pragma: no cover - never constructed
        raise AttributeError(name)
