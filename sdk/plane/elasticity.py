"""The fields of a queue's elasticity object beyond its kind, checked when a queue is written.

`store.check_elasticity` checks the kind, the numbers' signs and min <= max; this adds what the
controller relies on, so a typo or a nonsense policy is refused at `queues add` / PATCH time with
a message naming the field, instead of surfacing later as a controller that silently does nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.shapes import check_shape
from dreamlake.lakeshore.types import check_name, unsendable

#: Every field an elasticity object may carry.
FIELDS = (
    "kind",
    "min",
    "max",
    "target_per_worker",
    "idle_s",
    "provider",
    "pool",
    "match",
    "steal_delay_s",
    "cost_weight",
)
#: Worker counts: whole numbers, however JSON spelled them.
COUNTS = ("min", "max")


def _whole(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or (math.isfinite(value) and value == int(value))


def check_scaling(value: Mapping[str, Any]) -> None:
    """Refuse unknown fields, fractional worker counts, a zero target, bad names, and a
    `fully_elastic` floor (it scales to zero by definition: a floor is `elastic`)."""
    unknown = sorted(set(value) - set(FIELDS))
    if unknown:
        raise InvalidArgument(
            f"unknown elasticity field(s) {', '.join(unknown)}; use {', '.join(FIELDS)}"
        )
    for field in COUNTS:
        if field in value and not _whole(value[field]):
            raise InvalidArgument(f"elasticity.{field} must be a whole number of workers")
    if "target_per_worker" in value and not value["target_per_worker"] > 0:
        raise InvalidArgument("elasticity.target_per_worker must be above 0 (jobs per worker)")
    for field in ("provider", "pool"):
        if field in value:
            check_name(value[field], f"elasticity.{field}")
    match = value.get("match")
    if match is not None and (
        not isinstance(match, Mapping) or not all(isinstance(k, str) for k in match)
    ):
        raise InvalidArgument("elasticity.match must be an object (launch-spec overrides)")
    if isinstance(match, Mapping) and "shape" in match:
        check_shape(match["shape"], "elasticity.match.shape")
    bad = unsendable(match, "elasticity.match") if match is not None else None
    if bad is not None:
        raise InvalidArgument(f"{bad[0]} {bad[1]}")
    kind = value.get("kind", "none")
    if kind == "fully_elastic" and value.get("min", 0) > 0:
        raise InvalidArgument(
            "elasticity kind 'fully_elastic' scales to zero and takes no 'min'; "
            "use 'elastic' for a floor"
        )
    if kind == "none" and "pool" in value:
        raise InvalidArgument(
            "a queue with elasticity kind 'none' is never scaled, so it cannot join a pool"
        )
