"""Resources (issue 34): a job's request on its row, a queue's default, where an attempt runs.

The claim's half is the `fits` fragment (sql/queries.sql), bound from what the claimer says it
has free (`resources.fit_params`); the daemon picks the GPUs and writes them here (`place`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from dreamlake.lakeshore.errors import InvalidArgument, LeaseLost, NotFound
from dreamlake.lakeshore.plane.connector import Transaction
from dreamlake.lakeshore.resources import FREE_KEYS, check_resources, request_columns
from dreamlake.lakeshore.types import QueueInfo

from .base import StoreBase

#: The CPUs or memory of a claimer that does not count them (`resources.FREE_KEYS`).
UNCOUNTED = float(FREE_KEYS["cpus"])

#: Where a claim's parameters keep what its worker has in all (`free.box`), for the
#: reservation (reservation.py); no statement binds it.
BOX = "_box"

#: The most a placement may weigh as JSON: a few GPUs' indexes, UUIDs and names.
MAX_PLACEMENT_BYTES = 16 * 1024


def asked(request: Mapping[str, Any] | None, queue: QueueInfo) -> dict[str, Any] | None:
    """What a submit asks for: its own request, else its queue's default, else nothing."""
    if request is not None:
        return check_resources(request)
    return dict(queue.resources) or None


def fitted(params: Mapping[str, Any]) -> bool:
    """Whether a claim's parameters carry what its claimer has free (`fit_params`)."""
    return "gpu_share" in params


def scarce(params: Mapping[str, Any]) -> bool:
    """Whether a fitted claim's figures run out: GPUs, or counted CPUs or memory. Then it
    takes one job, since the next one's fit depends on where the claimer puts this one. A
    worker with no GPU and nothing counted fits every job it may take at once."""
    return fitted(params) and (
        params["gpus_whole"] > 0
        or params["gpu_share"] > 0
        or params["cpus"] < UNCOUNTED
        or params["memory_gb"] < UNCOUNTED
    )


def write_request(tx: Transaction, inv_id: str, request: Mapping[str, Any]) -> None:
    """Record a submit's request on the row it just inserted (`set_invocation_resources`)."""
    tx.all(
        "set_invocation_resources",
        id=inv_id,
        resources=json.dumps(dict(request)),
        **request_columns(request),
    )


class PlacementStore(StoreBase):
    """Where a claimed attempt runs."""

    def place(self, inv_id: str, lease: str, placement: Mapping[str, Any]) -> None:
        """Record where the attempt holding `lease` runs; refused once the lease is lost."""
        if not isinstance(placement, Mapping):
            raise InvalidArgument("placement must be an object")
        text = json.dumps(dict(placement), sort_keys=True)
        if len(text) > MAX_PLACEMENT_BYTES:
            raise InvalidArgument(
                f"placement is {len(text)} bytes of JSON; at most {MAX_PLACEMENT_BYTES}"
            )
        with self.connector.transaction(durable=False) as tx:
            if tx.one("place_invocation", id=inv_id, lease=lease, placement=text):
                tx.all("unmark_pending", id=inv_id)  # a reservation mark must not outlive it
                return
            if tx.one("gang_place", id=inv_id, lease=lease, placement=text):
                return  # a gang's part of rank above 0 (gangs.py): on its part's row
            held = tx.one("lease_of", id=inv_id)
        if held is None:
            raise NotFound(f"unknown invocation '{inv_id}'")
        raise LeaseLost(
            f"placement refused: invocation '{inv_id}' is no longer held under this lease "
            f"(state {held['state']})"
        )
