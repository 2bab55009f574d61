"""What a queue handle is, apart from what it does: its name, kind and options, its plane, the
handles derived from it (`bind`, `for_run`), the row check of its first use, and how it pickles.

A handle is cheap and lazy: constructing one touches no plane, and a job can carry one to
another process by reference. Kept apart from the verbs (sync_queue.py), which talk to the
plane through what this class holds; `SyncQueue` is a `QueueHandle`.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .anneal import Anneal, AnnealState, check_temperature
from .context import current_run, run_queue_name
from .errors import InvalidArgument
from .plane.base import Plane
from .plane.default import default_plane
from .plane.reference import reference as plane_reference
from .plane.reference import resolve as resolve_plane
from .queue_args import (
    ABSENT,
    check_priority_field,
    checked_elasticity,
    payload_field,
    wire_name,
)
from .queue_jobs import checked_runtime
from .queue_rows import RUN_QUEUE_MARK, RUN_QUEUE_TOUCH_S, RowSpec, prepare_row
from .resources import check_optional
from .types import normalize_kind

if TYPE_CHECKING:
    from .runtime.spec import Runtime

_QH = TypeVar("_QH", bound="QueueHandle")

#: Derived handles (`bind`, `for_run`) one queue keeps; the oldest is dropped past this.
DERIVED_CACHE = 256


class QueueHandle:
    """A queue's identity and settings on a plane (see `SyncQueue` for its verbs)."""

    def _configure(
        self,
        name: str,
        *,
        dispatch: Plane | None,
        kind: str,
        temperature: float = 1.0,
        elasticity: Mapping[str, Any] | None = None,
        priority_field: str | None = None,
        anneal: Mapping[str, Any] | None = None,
        declare: bool = False,
        resources: Mapping[str, Any] | None = None,
        runtime: Runtime | None = None,
    ) -> None:
        self.name = wire_name(name)
        self.kind = normalize_kind(kind)
        #: Whether results, frames and topic values read through this handle may be unpickled
        #: (thunks, udf envelopes): only for workers trusted with code. Per call: allow_pickle=.
        self.allow_pickle = False
        self.temperature = check_temperature(temperature)
        self.priority_field = check_priority_field(priority_field)
        self.anneal = Anneal.parse(anneal, self.temperature) if anneal is not None else None
        self.elasticity = checked_elasticity(elasticity) if elasticity is not None else None
        #: The request of a job submitted here without one, kept on the queue row.
        self.resources = check_optional(resources, "queue resources")
        #: What a job submitted here brings unless its submit says (sdk/runtime/): None, the
        #: default, ships a code job's own modules. Kept on the handle, not the queue row.
        self.runtime = cast("Runtime | None", checked_runtime(runtime, "queue runtime"))
        self._dispatch = dispatch
        self._held: dict[str, str] = {}  # invocation id -> lease, for post()
        #: The run of a run queue (`for_run`): its jobs carry it, whatever run is current.
        self.run_id: str | None = None
        self._row = RowSpec(
            self.name,
            kind if kind == "priority" else self.kind,
            elasticity=self.elasticity,
            resources=self.resources,
            declare=declare or self.elasticity is not None or self.resources is not None,
        )
        self._reset_state()

    def _reset_state(self) -> None:
        self._lock = threading.Lock()
        self._ready_at: float | None = None  # when first use last prepared the row
        self._derived: OrderedDict[tuple[str, int | str], tuple[object, QueueHandle]] = (
            OrderedDict()
        )
        self._annealing = AnnealState(self.anneal, self.temperature) if self.anneal else None

    def expect_row(self: _QH, **policy: Any) -> _QH:
        """Set how first use treats the queue row (`queue_rows.RowSpec`: declare, validate,
        missing); returns this handle."""
        self._row = replace(self._row, **policy)
        return self

    def bind(self: _QH, dispatch: Plane) -> _QH:
        """This queue, same class and settings, on another plane (cached per plane)."""
        if dispatch is self._dispatch:
            return self
        return self._derive(("plane", id(dispatch)), dispatch, lambda: self._clone(dispatch))

    def for_run(self: _QH, run_id: str | None = None) -> _QH:
        """This queue's per-run queue (`<name>-run-<slug>`), for `run_id` or the current run.

        Outside any run it is this queue itself. The run queue's row is created on first use
        with this queue's kind and elasticity, and marked for `lakeshore queues prune`.
        """
        run = run_id if run_id is not None else current_run()
        if run is None:
            return self
        return self._derive(("run", run), None, lambda: self._run_clone(run))

    def _derive(self, key: tuple[str, int | str], owner: object, make: Callable[[], _QH]) -> _QH:
        """A derived handle, cached so that its first-use checks run once, not per submit."""
        with self._lock:
            hit = self._derived.get(key)
            if hit is not None and hit[0] is owner:  # the cache holds `owner`: no id reuse
                self._derived.move_to_end(key)
                return cast(_QH, hit[1])
        made = make()
        with self._lock:
            self._derived[key] = (owner, made)
            while len(self._derived) > DERIVED_CACHE:
                self._derived.popitem(last=False)
        return made

    def _clone(self: _QH, dispatch: Plane | None) -> _QH:
        other = copy.copy(self)
        other._dispatch = dispatch
        other._held = {}
        other._reset_state()
        return other

    def _run_clone(self: _QH, run: str) -> _QH:
        other = self._clone(self._dispatch)
        other.name = run_queue_name(self.name, run)
        other.run_id = run
        other._row = replace(
            self._row,
            name=other.name,
            description=f"{RUN_QUEUE_MARK} of '{self.name}' for run '{run[:200]}'",
            declare=True,
            missing="create",
            touch_s=RUN_QUEUE_TOUCH_S,
        )
        return other

    def _first_use(self, *, submitting: bool) -> None:
        """Check or write the queue row as this handle's `RowSpec` says, once (see queue_rows)."""
        row = self._row
        ready = self._ready_at
        if ready is not None and (row.touch_s is None or time.monotonic() - ready < row.touch_s):
            return
        if not row.needed(submitting=submitting):
            return
        with self._lock:
            if self._ready_at is not ready:
                return  # another thread did it meanwhile
            prepare_row(self.dispatch, row, submitting=submitting, touch=ready is not None)
            self._ready_at = time.monotonic()

    def priority_of(self, body: Any, priority: float | None = None) -> float:
        """The priority a submit uses: `priority` when given, else the payload's priority field.

        With a `priority_field`, a dict payload holding that field gives the priority; so does
        a udf call whose argument of that name is bound, or whose first argument is such a dict.
        """
        if priority is not None:
            return priority
        if self.priority_field is None:
            return 0.0
        value = payload_field(body, self.priority_field)
        if value is ABSENT:
            return 0.0
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidArgument(
                f"the payload's priority field '{self.priority_field}' must be a number, "
                f"got {value!r}"
            )
        return float(value)

    def current_temperature(self) -> float:
        """The temperature the next claim asks for (the anneal schedule applied)."""
        return self._annealing.peek() if self._annealing else self.temperature

    @property
    def dispatch(self) -> Plane:
        """The plane, resolved on first use so that constructing a queue costs nothing."""
        if self._dispatch is None:
            self._dispatch = default_plane()
            self._on_default_plane = True
        return self._dispatch

    # A handle pickles by reference (a job that submits to another queue carries it): its name,
    # kind and options, and its plane's address, never the plane's connections or locks.
    _LOCAL_STATE = ("_lock", "_ready_at", "_derived", "_annealing", "_held", "_dispatch")

    def __getstate__(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if k not in self._LOCAL_STATE}
        plane = None if getattr(self, "_on_default_plane", False) else self._dispatch
        state["_plane_reference"] = plane_reference(plane)
        state.pop("_on_default_plane", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        self._dispatch = resolve_plane(state.pop("_plane_reference"))
        self.__dict__.update(state)
        self._held = {}
        self._reset_state()

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in self._repr_extra().items())
        return f"{type(self).__name__}({self.name!r}, kind={self.kind!r}{extra})"

    def _repr_extra(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self.temperature != 1.0 or self.anneal is not None:
            extra["temperature"] = self.temperature
        if self.anneal is not None:
            extra["anneal"] = self.anneal.as_dict()
        if self.priority_field is not None:
            extra["priority_field"] = self.priority_field
        if self.elasticity is not None:
            extra["elasticity"] = self.elasticity
        if self.resources is not None:
            extra["resources"] = self.resources
        if self.runtime is not None:
            extra["runtime"] = self.runtime
        return extra
