"""Work that is more than one job, on the producer's side: delays and dependencies (the
arguments that say when or after what a submit may run), normalised at the API edge.

`submit(..., after=[id, ...])` holds the job as `waiting` until every parent has succeeded
(sdk/plane/dependencies.py); `dls.output(id)` as an argument of a thunk or udf call waits for
that parent too, and the worker receives the parent's result in its place.

`submit(..., delay_s=30)` or `submit(..., at=datetime)`: the plane keeps the job as `scheduled`
until then (sdk/plane/delays.py). `at` is a timezone-aware datetime, or a naive one read as
UTC (never as the producer's local time: a job's due time must not depend on the box that
submitted it), or epoch seconds.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from .errors import DispatchError, InvalidArgument
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


def epoch_of_text(text: str, what: str = "at") -> float:
    """A due time written as text (a command line, a JSON field): epoch seconds, or an ISO 8601
    time with its zone (`Z` or an offset), or with none, read as UTC as a naive datetime is."""
    try:
        number = float(text)
    except ValueError:
        pass
    else:
        if math.isfinite(number):
            return number
    try:
        parsed = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(
            f"{what} must be epoch seconds or an ISO 8601 time (2030-01-01T03:00:00+01:00; "
            f"no zone means UTC), got {text[:64]!r}"
        ) from None
    return float(epoch_of(parsed, what) or 0.0)


def with_due(req: SubmitRequest, delay_s: float | None, at: Any) -> SubmitRequest:
    """`req` with its delay (checked by the plane, which alone reads the clock it is due by)."""
    if delay_s is None and at is None:
        return req
    return replace(req, delay_s=delay_s, at=epoch_of(at))


@dataclass(frozen=True)
class Output:
    """A parent's result, as an argument of a thunk or udf call (`dls.output(id)`).

    The producer sends only this marker (and waits on the parent); the claim hands the worker
    the parent's stored result, which takes the marker's place before the call. A Ref the
    parent returned stays a Ref: no bytes pass through the producer.
    """

    id: str

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id.isalnum() or not 0 < len(self.id) <= 64:
            raise InvalidArgument(f"dls.output takes an invocation id, got {self.id!r:.80}")


def output(inv_id: str) -> Output:
    """The result of invocation `inv_id`, as an argument of a later job: that job waits for it
    (as if `after=[inv_id]`), and its worker receives the result in this marker's place."""
    return Output(inv_id)


#: How deep `outputs_in` looks into lists, tuples and dicts of arguments.
_DEPTH = 4


def outputs_in(args: Iterable[Any], kwargs: Mapping[str, Any]) -> tuple[str, ...]:
    """The parent ids a call's arguments name through `dls.output`, in order, once each."""
    return tuple(dict.fromkeys(_walk([*args, *kwargs.values()], _DEPTH)))


def _walk(values: Iterable[Any], depth: int) -> Iterator[str]:
    for value in values:
        if isinstance(value, Output):
            yield value.id
        elif depth and isinstance(value, (list, tuple)):
            yield from _walk(value, depth - 1)
        elif depth and isinstance(value, dict):
            yield from _walk(value.values(), depth - 1)


def with_after(
    req: SubmitRequest, after: Iterable[str] | None, after_failure: str
) -> SubmitRequest:
    """`req` waiting on `after` too (besides the parents its arguments name), and what a
    parent's failure does to it (checked by the plane: "cancel" or "run")."""
    if isinstance(after, str):
        raise InvalidArgument("after takes a list of invocation ids, not one id as a string")
    extra = tuple(after or ())
    if not extra and after_failure == "cancel":
        return req
    return replace(
        req, after=tuple(dict.fromkeys((*req.after, *extra))), after_failure=after_failure
    )


def substitute(
    args: tuple[Any, ...], kwargs: dict[str, Any], inputs: Mapping[str, bytes | None] | None
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """On the worker: each `Output` marker in a call's arguments replaced by its parent's
    result, which the claim carried (`Claim.inputs`). Decoded as plain values and Refs only:
    a result is what another worker wrote, and this one does not unpickle it."""
    if not outputs_in(args, kwargs):
        return args, kwargs
    from . import spill

    def value(marker: Output) -> Any:
        if inputs is None or marker.id not in inputs:
            raise DispatchError(
                f"the output of invocation {marker.id} is not available: it did not succeed "
                "(this job was submitted with after_failure='run')"
            )
        data = inputs[marker.id]
        return None if data is None else spill.loads(data, allow_pickle=False)

    def swap(item: Any, depth: int) -> Any:
        if isinstance(item, Output):
            return value(item)
        if depth and isinstance(item, list):
            return [swap(v, depth - 1) for v in item]
        if depth and isinstance(item, tuple):
            return tuple(swap(v, depth - 1) for v in item)
        if depth and isinstance(item, dict):
            return {k: swap(v, depth - 1) for k, v in item.items()}
        return item

    return (
        tuple(swap(a, _DEPTH) for a in args),
        {k: swap(v, _DEPTH) for k, v in kwargs.items()},
    )
