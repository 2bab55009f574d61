"""Work that is more than one job, on the producer's side: delays (and, with them, the
arguments that say when or after what a submit may run), normalised at the API edge.

`submit(..., delay_s=30)` or `submit(..., at=datetime)`: the plane keeps the job as `scheduled`
until then (sdk/plane/delays.py). `at` is a timezone-aware datetime, or a naive one read as
UTC (never as the producer's local time: a job's due time must not depend on the box that
submitted it), or epoch seconds.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

from .errors import InvalidArgument
from .types import SubmitRequest


def epoch_of(at: Any, what: str = "at") -> float | None:
    """`at` as epoch seconds: a datetime (naive = UTC), a number, or None."""
    if at is None:
        return None
    if isinstance(at, dt.datetime):
        if at.tzinfo is None:
            at = at.replace(tzinfo=dt.timezone.utc)
        return float(at.timestamp())
    if isinstance(at, (int, float)) and not isinstance(at, bool):
        return float(at)
    raise InvalidArgument(
        f"{what} must be a datetime (timezone-aware, or naive read as UTC) or epoch seconds, "
        f"got {at!r}"
    )


def with_due(req: SubmitRequest, delay_s: float | None, at: Any) -> SubmitRequest:
    """`req` with its delay (checked by the plane, which alone reads the clock it is due by)."""
    if delay_s is None and at is None:
        return req
    return replace(req, delay_s=delay_s, at=epoch_of(at))
