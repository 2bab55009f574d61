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


def finished(target: object, method: str) -> Callable[[], int]:
    """Wrap `target.method` so its calls are counted as they return: a read counted here has
    seen the store, where `counted` also counts one still on its way to it."""
    calls: list[None] = []
    inner = getattr(target, method)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return inner(*args, **kwargs)
        finally:
            calls.append(None)

    setattr(target, method, wrapper)
    return lambda: len(calls)
