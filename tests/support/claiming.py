"""Claims in a test's words: the queues and fields as keywords, the plane's one parameter
(`ClaimArgs`) built here, so a test that claims stays one short line (issue 38 made
`ClaimArgs` the one claim parameter of every layer)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dreamlake.lakeshore.errors import DispatchError
from dreamlake.lakeshore.plane.base import Plane
from dreamlake.lakeshore.plane.base import claim as claim_one
from dreamlake.lakeshore.plane.store import SqlStore
from dreamlake.lakeshore.types import Ack, Claim, ClaimArgs, Invocation


def claim(
    plane: Plane, queues: Sequence[str], *, worker: str, wait_s: float = 0.0, **fields: Any
) -> Claim | None:
    return claim_one(plane, ClaimArgs(queues, worker, **fields), wait_s=wait_s)


def claim_many(
    plane: Plane, queues: Sequence[str], *, worker: str, wait_s: float = 0.0, **fields: Any
) -> list[Claim]:
    return plane.claim_many(ClaimArgs(queues, worker, **fields), wait_s=wait_s)


def ack_and_claim(
    plane: Plane,
    acks: Sequence[Ack],
    queues: Sequence[str],
    *,
    worker: str,
    wait_s: float = 0.0,
    **fields: Any,
) -> tuple[list[DispatchError | None], list[Claim]]:
    return plane.ack_and_claim(acks, ClaimArgs(queues, worker, **fields), wait_s=wait_s)


def store_claim_many(
    store: SqlStore, ns: str, queues: Sequence[str], *, worker: str, **fields: Any
) -> list[Claim]:
    return store.claim_many(ns, ClaimArgs(queues, worker, **fields))


def store_ack_and_claim(
    store: SqlStore,
    ns: str,
    acks: Sequence[Ack],
    queues: Sequence[str],
    *,
    worker: str,
    on_ended: Callable[[Mapping[str, Invocation]], None] | None = None,
    **fields: Any,
) -> tuple[list[DispatchError | None], list[Claim]]:
    return store.ack_and_claim(ns, acks, ClaimArgs(queues, worker, **fields), on_ended=on_ended)
