"""Option types every Lakeshore command line shares: numbers that are numbers.

click's FloatRange lets `nan` through (every comparison with it is false) and `inf` through an
open upper end, and IntRange takes any integer; a plane stores 64 bits. These refuse both with
click's usual one-line usage error, naming the option and what it takes.
"""

from __future__ import annotations

import math
from typing import Any

import click

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.workflow import epoch_of_text

INT64_MAX = 2**63 - 1


class Finite(click.FloatRange):
    """A finite float within [min, max] (open ends as FloatRange has them)."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if isinstance(number, float) and not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number: give {self._describe()}", param, ctx)
        return number

    def _describe(self) -> str:
        low = "" if self.min is None else f"{'>' if self.min_open else '>='} {self.min:g}"
        high = "" if self.max is None else f"{'<' if self.max_open else '<='} {self.max:g}"
        return (
            "a number " + " and ".join(p for p in (low, high) if p) if low or high else "a number"
        )


def seconds(low: float = 0.0, high: float | None = None, *, low_open: bool = False) -> Finite:
    """A duration in seconds: finite, at least `low` (above it with `low_open`)."""
    return Finite(min=low, max=high, min_open=low_open)


def count(low: int = 0, high: int = INT64_MAX) -> click.IntRange:
    """A whole number a plane can store: at most 2**63-1 unless a smaller cap is given."""
    return click.IntRange(low, high)


class Moment(click.types.FloatParamType):
    """A point in time: epoch seconds, or ISO 8601 (with `Z` or an offset; none means UTC),
    read as the SDK's `at=` reads a datetime, never in the shell's local zone. A float type
    underneath: what it gives the command is epoch seconds."""

    name = "time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float):
            return value
        try:
            return epoch_of_text(str(value), "the time")
        except InvalidArgument as exc:
            self.fail(str(exc), param, ctx)
