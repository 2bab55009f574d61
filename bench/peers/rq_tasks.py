"""RQ's job function (RQ imports it by dotted path)."""

from __future__ import annotations

from .counter import bump


def noop(i: int = 0) -> int:
    bump()
    return i


def echo(x: object) -> object:
    """The payload suite's task: the argument comes back as the result."""
    return x
