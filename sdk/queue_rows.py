"""What a queue handle checks or writes on the plane's queue row, once, on first use.

Constructing a queue never calls the plane. What happens at its first submit (or claim) depends
on how the handle was made; `RowSpec` records it:

- `Queue("x")`, `Queue("x", kind=...)`: nothing; the first submit creates a missing queue as fifo.
- typed (`PriorityQueue`, `BoltzmannQueue`, `FILOQueue`), or any `elasticity=`: ensure the row;
  create it with the kind and elasticity, or patch an elasticity that differs.
- `Queue.named("x")`: ensure the row, and refuse one whose kind disagrees with the handle.
- `from dreamlake.lakeshore.q import x`: warn (`UnknownQueueWarning`, with close matches) when
  the queue does not exist; the submit then creates it.
- `@udf(queue="x")`: nothing, unless `LAKESHORE_STRICT_QUEUES=1`: then a missing queue raises.
- a run queue (`@udf(..., scope="run")`, `q.for_run(...)`): ensure the row, marked as a run
  queue, and touch it hourly while in use, for `lakeshore queues prune`.

`LAKESHORE_STRICT_QUEUES=1` turns the warning into `NotFound` as well.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any, Literal

from .errors import Conflict, InvalidArgument, NotFound
from .plane.base import Plane
from .types import QueueInfo, normalize_kind

__all__ = [
    "RUN_QUEUE_MARK",
    "RUN_QUEUE_TOUCH_S",
    "STRICT_ENV",
    "RowSpec",
    "UnknownQueueWarning",
    "prepare_row",
]

STRICT_ENV = "LAKESHORE_STRICT_QUEUES"
#: How a run queue's row description starts; `queues prune` only removes rows marked so.
RUN_QUEUE_MARK = "Run-scoped queue"
#: A run queue's handle re-touches its row (bumping `updated_at`) at most this often while it
#: submits, so `queues prune --older-than` sees the queue in use without a write per submit.
RUN_QUEUE_TOUCH_S = 3600.0

Missing = Literal["create", "warn", "strict-env"]


class UnknownQueueWarning(UserWarning):
    """The first submit through an implicit handle went to a queue the plane does not have."""


@dataclass(frozen=True)
class RowSpec:
    name: str
    #: The kind the row is created with: fifo, priority, filo or boltzmann.
    kind: str
    #: As `check_elasticity` returns it (the handle checks it when it is made), so it compares
    #: equal to the row's own when the two agree.
    elasticity: dict[str, Any] | None = None
    description: str | None = None
    #: Create a missing row with the fields above; patch a differing elasticity / description.
    declare: bool = False
    #: Refuse an existing row whose kind disagrees (`Queue.named`).
    validate: bool = False
    #: What a submit to a missing queue does before the plane creates it.
    missing: Missing = "create"
    #: Re-touch the row this often (run queues), or never.
    touch_s: float | None = None
    #: The queue's default request (issue 34): created with it, patched when it differs.
    resources: dict[str, Any] | None = None

    def needed(self, *, submitting: bool) -> bool:
        """Whether first use has anything to do for this call."""
        return self.declare or self.validate or (submitting and self.checks_missing())

    def checks_missing(self) -> bool:
        return self.missing == "warn" or (self.missing == "strict-env" and strict_queues())


def strict_queues() -> bool:
    return os.environ.get(STRICT_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def prepare_row(plane: Plane, spec: RowSpec, *, submitting: bool, touch: bool = False) -> None:
    """Do what `spec` asks of the row; `touch` patches it even when nothing differs."""
    try:
        info: QueueInfo | None = plane.queue(spec.name)
    except NotFound:
        info = None
    if info is None:
        if submitting and spec.checks_missing():
            unknown_queue(plane, spec.name, strict=strict_queues())
        if not (spec.declare or spec.validate):
            return
        try:
            plane.create_queue(spec.name, **_create_fields(spec))
            return
        except Conflict:  # created by someone else since we looked
            info = plane.queue(spec.name)
    _reconcile(plane, spec, info, touch=touch)


def _create_fields(spec: RowSpec) -> dict[str, Any]:
    fields: dict[str, Any] = {"kind": spec.kind}
    if spec.elasticity is not None:
        fields["elasticity"] = spec.elasticity
    if spec.description is not None:
        fields["description"] = spec.description
    if spec.resources is not None:
        fields["resources"] = spec.resources
    return fields


def _reconcile(plane: Plane, spec: RowSpec, info: QueueInfo, *, touch: bool) -> None:
    if spec.validate and normalize_kind(info.kind) != normalize_kind(spec.kind):
        raise InvalidArgument(
            f"queue '{spec.name}' is a {info.kind} queue on the plane, but this handle is "
            f"{spec.kind}: workers that follow the row would claim in {info.kind} order. "
            f"Use a {info.kind} handle, or delete and recreate the queue as {spec.kind}"
        )
    if not spec.declare:
        return
    changes: dict[str, Any] = {}
    if spec.elasticity is not None and info.elasticity != spec.elasticity:
        changes["elasticity"] = spec.elasticity
    if spec.description is not None and (touch or info.description != spec.description):
        changes["description"] = spec.description
    if spec.resources is not None and info.resources != spec.resources:
        changes["resources"] = spec.resources
    if not changes:
        return
    try:
        plane.patch_queue(spec.name, changes)
    except InvalidArgument as exc:
        raise InvalidArgument(
            f"cannot give queue '{spec.name}' this handle's settings {sorted(changes)}: {exc}"
        ) from exc


def unknown_queue(plane: Plane, name: str, *, strict: bool) -> None:
    """Warn about (or, strict, refuse) a submit to a queue the plane does not have."""
    try:
        names = [q.name for q in plane.queues() if q.namespace == plane.namespace]
    except NotFound:  # a namespace nothing was written to yet: no queues to suggest
        names = []
    import difflib  # only for this warning: a queue that exists never loads it

    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    where = f"namespace '{plane.namespace}'"
    if strict:
        raise NotFound(
            f"queue '{name}' does not exist in {where}{hint} ({STRICT_ENV}=1 refuses to create "
            "queues on first submit: create it with Queue.named(...) or `lakeshore queues add`)"
        )
    warnings.warn(
        f"queue '{name}' does not exist in {where}{hint or '.'} The first submit creates it "
        f"(set {STRICT_ENV}=1 to make this an error).",
        UnknownQueueWarning,
        stacklevel=5,
    )
