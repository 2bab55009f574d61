"""Counting a real object's calls, for tests that prove a call was saved (not mocking it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def counted(target: object, method: str) -> Callable[[], int]:
    """Wrap `target.method` so its calls are counted; returns how many so far."""
    calls: list[None] = []
    inner = getattr(target, method)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls.append(None)
        return inner(*args, **kwargs)

    setattr(target, method, wrapper)
    return lambda: len(calls)
