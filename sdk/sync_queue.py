"""`SyncQueue`: a named channel on a plane, with blocking verbs (producer and worker).

Split from queue.py (issue 38), which re-exports it beside its async sibling `Queue` and the
typed kinds.
"""

from __future__ import annotations

import copy
import functools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Concatenate, NoReturn, ParamSpec, TypeVar, cast

from . import codec, protocols
from .anneal import Anneal, AnnealState, check_temperature
from .context import current_run, run_queue_name
from .envelope import Envelope
from .errors import DispatchError, InvalidArgument
from .plane.base import Plane
from .plane.base import claim as claim_one
from .plane.default import default_plane
from .plane.reference import reference as plane_reference
from .plane.reference import resolve as resolve_plane
from .queue_args import (
    ABSENT,
    check_priority_field,
    checked_elasticity,
    misplaced_argument,
    payload_field,
    refuse_arguments,
    wire_name,
)
from .queue_jobs import DEFAULT_LEASE_S, Job, encode_submit, result_of, worker_identity
from .queue_rows import RUN_QUEUE_MARK, RUN_QUEUE_TOUCH_S, RowSpec, prepare_row
from .resources import check_optional
from .topic import Topic, iter_frames
from .types import STATES, Claim, ClaimArgs, Invocation, SubmitRequest, normalize_kind
from .workflow import with_after

if TYPE_CHECKING:
    from .mapping import MapResults

P = ParamSpec("P")
_SQ = TypeVar("_SQ", bound="SyncQueue")
_R = TypeVar("_R")


def _through_plane(
    verb: Callable[Concatenate[_SQ, P], _R],
) -> Callable[Concatenate[_SQ, P], _R]:
    """Run a verb with its queue's plane as the caller's plane for objects (objects/plane.py):
    a spilled value's durable copy goes up through it when it is a control plane over HTTP and
    no storage is configured, and a plane-tier Ref is read back with its token."""

    @functools.wraps(verb)
    def run(self: _SQ, /, *args: P.args, **kwargs: P.kwargs) -> _R:
        from .objects.plane import using  # the object store, imported by the first verb

        with using(self.dispatch):
            return verb(self, *args, **kwargs)

    return run


#: Derived handles (`bind`, `for_run`) one queue keeps; the oldest is dropped past this.
DERIVED_CACHE = 256


class SyncQueue:
    """A named channel on a plane, with blocking verbs.

    `kind` picks the claim order this handle asks for. `temperature` is a boltzmann argument:
    any other value than its default 1.0 on another kind raises (it would do nothing).
    `elasticity` is stored on the queue row at first use. A leading '/' is stripped:
    `SyncQueue("/shared").name == "shared"`.
    """

    def __init__(
        self,
        name: str,
        *,
        dispatch: Plane | None = None,
        kind: str = "fifo",
        temperature: float = 1.0,
        elasticity: Mapping[str, Any] | None = None,
        resources: Mapping[str, Any] | None = None,
        **unknown: NoReturn,
    ) -> None:
        refuse_arguments(type(self), name, kind, unknown)
        if check_temperature(temperature) != 1.0 and normalize_kind(kind) != "boltzmann":
            raise misplaced_argument("temperature", type(self), name, kind)
        self._configure(
            name,
            dispatch=dispatch,
            kind=kind,
            temperature=temperature,
            elasticity=elasticity,
            resources=resources,
        )

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
        self._derived: OrderedDict[tuple[str, int | str], tuple[object, SyncQueue]] = OrderedDict()
        self._annealing = AnnealState(self.anneal, self.temperature) if self.anneal else None

    @classmethod
    def named(cls: type[_SQ], name: str, **kw: Any) -> _SQ:
        """Like the constructor, and lazy too; at first use it also ensures the queue row.

        The plain constructor trusts the plane (the first submit creates a missing queue as
        fifo). A named handle creates the row with its kind and elasticity when it is missing,
        and raises `InvalidArgument` at first use when the row's kind disagrees with it.
        """
        return cls(name, **kw).expect_row(declare=True, validate=True)

    def expect_row(self: _SQ, **policy: Any) -> _SQ:
        """Set how first use treats the queue row (`queue_rows.RowSpec`: declare, validate,
        missing); returns this handle."""
        self._row = replace(self._row, **policy)
        return self

    def bind(self: _SQ, dispatch: Plane) -> _SQ:
        """This queue, same class and settings, on another plane (cached per plane)."""
        if dispatch is self._dispatch:
            return self
        return self._derive(("plane", id(dispatch)), dispatch, lambda: self._clone(dispatch))

    def for_run(self: _SQ, run_id: str | None = None) -> _SQ:
        """This queue's per-run queue (`<name>-run-<slug>`), for `run_id` or the current run.

        Outside any run it is this queue itself. The run queue's row is created on first use
        with this queue's kind and elasticity, and marked for `lakeshore queues prune`.
        """
        run = run_id if run_id is not None else current_run()
        if run is None:
            return self
        return self._derive(("run", run), None, lambda: self._run_clone(run))

    def _derive(self, key: tuple[str, int | str], owner: object, make: Callable[[], _SQ]) -> _SQ:
        """A derived handle, cached so that its first-use checks run once, not per submit."""
        with self._lock:
            hit = self._derived.get(key)
            if hit is not None and hit[0] is owner:  # the cache holds `owner`: no id reuse
                self._derived.move_to_end(key)
                return cast(_SQ, hit[1])
        made = make()
        with self._lock:
            self._derived[key] = (owner, made)
            while len(self._derived) > DERIVED_CACHE:
                self._derived.popitem(last=False)
        return made

    def _clone(self: _SQ, dispatch: Plane | None) -> _SQ:
        other = copy.copy(self)
        other._dispatch = dispatch
        other._held = {}
        other._reset_state()
        return other

    def _run_clone(self: _SQ, run: str) -> _SQ:
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
        return extra

    # -- producer verbs -----------------------------------------------------------------------

    def submit(
        self,
        payload: Any = None,
        *,
        envelope: Envelope | None = None,
        key: str | None = None,
        priority: float | None = None,
        max_attempts: int = 3,
        timeout_s: float | None = None,
        block_s: float = 30.0,
        resources: Mapping[str, Any] | None = None,
        max_preemptions: int | None = None,
        delay_s: float | None = None,
        at: Any = None,
        after: Sequence[str] | None = None,
        after_failure: str = "cancel",
    ) -> str:
        """Enqueue; returns the durable invocation id. The same `key` returns the same id.

        `timeout_s` bounds the job's run; `block_s` bounds how long a submit waits for room on a
        queue whose admission says `on_full: block`. Without `priority`, a priority queue reads
        it from the payload's `priority_field`; otherwise it is 0. `max_preemptions`: how many
        times its box may go away under it (not charged to `max_attempts`); None: the queue's
        `admission.max_preemptions`, else 20. `resources` is what the job needs to run (GPUs,
        CPUs, memory: `dreamlake.lakeshore.resources`); without it, a udf's, else the queue's.
        `delay_s` or `at` (a datetime, naive read as UTC, or epoch seconds) holds the job as
        `scheduled` until then (sdk/workflow.py). `after` (ids, on any queue of the namespace)
        holds it as `waiting` until each has succeeded; a parent that ends otherwise cancels
        it, unless `after_failure="run"` (then it runs once every parent has ended).
        """
        from .workflow import with_due

        req = self._request(
            payload,
            envelope,
            key,
            priority,
            max_attempts,
            timeout_s,
            resources=resources,
            max_preemptions=max_preemptions,
            after=after,
            after_failure=after_failure,
        )
        req = with_due(req, delay_s, at)
        return self.dispatch.submit(self.name, [req], wait_s=block_s)[0]

    @_through_plane
    def _request(
        self,
        payload: Any = None,
        envelope: Envelope | None = None,
        key: str | None = None,
        priority: float | None = None,
        max_attempts: int = 3,
        timeout_s: float | None = None,
        resources: Mapping[str, Any] | None = None,
        max_preemptions: int | None = None,
        after: Sequence[str] | None = None,
        after_failure: str = "cancel",
    ) -> SubmitRequest:
        self._first_use(submitting=True)
        priority = self.priority_of(envelope if envelope is not None else payload, priority)
        req = encode_submit(
            payload,
            envelope,
            key,
            priority,
            max_attempts,
            timeout_s,
            self.run_id,
            self._protocol(),
            resources=resources,
            max_preemptions=max_preemptions,
        )
        return with_after(req, after, after_failure)

    def _protocol(self) -> Callable[[], int]:
        """The pickle protocol this queue's live workers all load (`protocols.protocol_for`):
        read from their rows at most once per plane every few seconds, and only when a submit
        pickles something."""
        return functools.partial(protocols.protocol_for, self.dispatch, self.name)

    @_through_plane
    def submit_many(
        self,
        payloads: Sequence[Any],
        *,
        priority: float | None = None,
        max_attempts: int = 3,
        resources: Mapping[str, Any] | None = None,
        after: Sequence[str] | None = None,
        after_failure: str = "cancel",
        ids: Sequence[str] | None = None,
        after_each: Sequence[Sequence[str] | None] | None = None,
    ) -> list[str]:
        """Enqueue many in one transaction (one round trip over HTTP); `resources` is each
        job's request, as `submit` takes it. `after`: parents every job waits on;
        `after_each`: each job's own (one list, or None, per payload), which may name the `ids`
        (`dls.new_id()`, one per payload) of jobs earlier in the same batch."""
        self._first_use(submitting=True)
        protocol = self._protocol()
        if ids is not None and len(ids) != len(payloads):
            raise InvalidArgument(f"ids has {len(ids)} entries for {len(payloads)} payloads")
        if after_each is not None and len(after_each) != len(payloads):
            raise InvalidArgument(
                f"after_each has {len(after_each)} entries for {len(payloads)} payloads"
            )
        reqs = [
            with_after(
                encode_submit(
                    p,
                    None,
                    None,
                    self.priority_of(p, priority),
                    max_attempts,
                    None,
                    self.run_id,
                    protocol,
                    resources,
                ),
                [*(after or ()), *((after_each[i] or ()) if after_each else ())],
                after_failure,
            )
            for i, p in enumerate(payloads)
        ]
        if ids is not None:
            reqs = [replace(r, id=inv_id) for r, inv_id in zip(reqs, ids, strict=True)]
        return self.dispatch.submit(self.name, reqs)

    def map(
        self,
        fn: Callable[..., Any],
        inputs: Iterable[Any],
        *,
        ordered: bool = True,
        return_exceptions: bool = False,
        chunk_size: int | None = None,
        **submit: Any,
    ) -> MapResults:
        """`fn(x)` for each input, each a job (or `chunk_size` inputs a job), submitted lazily;
        the results in input order (or as they end). See `mapping` for the whole contract;
        `submit` takes `priority`, `max_attempts` and `timeout_s`."""
        from .mapping import run_map

        return run_map(
            self,
            fn,
            inputs,
            ordered=ordered,
            return_exceptions=return_exceptions,
            chunk_size=chunk_size,
            **submit,
        )

    def starmap(self, fn: Callable[..., Any], inputs: Iterable[Any], **kw: Any) -> MapResults:
        """`map` with each input a tuple of arguments: `fn(*x)`."""
        from .mapping import run_map

        return run_map(self, fn, inputs, star=True, **kw)

    @_through_plane
    def result(
        self,
        inv_id: str,
        *,
        timeout: float = 30.0,
        allow_pickle: bool | None = None,
        ref: bool = False,
    ) -> Any:
        """The result, waiting up to `timeout`; plain values only unless `allow_pickle`
        (default: this queue's `allow_pickle`) trusts the workers with code.

        `ref=True` returns the result's `Ref` rather than its value, to hand to the next job
        without the bytes coming here (`dls.get(ref)` reads it).
        """
        inv = self.dispatch.invocation(inv_id, wait_s=timeout)
        if not inv.terminal:
            raise TimeoutError(f"invocation {inv_id} still {inv.state} after {timeout}s")
        return result_of(inv, allow_pickle=self._pickles(allow_pickle), ref=ref)

    def call(
        self,
        payload: Any = None,
        *,
        timeout: float = 30.0,
        block_s: float = 30.0,
        allow_pickle: bool | None = None,
        **kw: Any,
    ) -> Any:
        """Submit and wait for the result: one request over HTTP (submit-and-wait).

        Takes `submit`'s keywords; raises TimeoutError if the job has not ended in `timeout`
        (it keeps its place in the queue: `result(id)` can still collect it).
        """
        req = self._request(payload, **kw)
        inv = self.dispatch.submit_and_wait(self.name, req, wait_s=timeout, block_s=block_s)
        if not inv.terminal:
            raise TimeoutError(f"invocation {inv.id} still {inv.state} after {timeout}s")
        return result_of(inv, allow_pickle=self._pickles(allow_pickle))

    @_through_plane
    def stream(
        self,
        inv_id: str,
        *,
        since: int = -1,
        timeout: float = 30.0,
        allow_pickle: bool | None = None,
    ) -> Iterator[Any]:
        """Decoded VALUE frames after `since`, live; END stops, ERROR raises."""
        return iter_frames(
            self.dispatch,
            inv_id,
            since=since,
            timeout=timeout,
            allow_pickle=self._pickles(allow_pickle),
        )

    def _pickles(self, allow_pickle: bool | None) -> bool:
        return self.allow_pickle if allow_pickle is None else allow_pickle

    def status(self, inv_id: str) -> Invocation:
        return self.dispatch.invocation(inv_id)

    def cancel(self, inv_id: str, *, kill: bool = False) -> bool:
        return self.dispatch.cancel(inv_id, kill=kill)

    def count(self, state: str = "queued") -> int:
        if state not in STATES:
            raise DispatchError(f"unknown state '{state}'; use {'|'.join(STATES)}")
        return self.dispatch.count(self.name, state)

    def __len__(self) -> int:
        return self.count()

    # -- worker verbs -------------------------------------------------------------------------

    def claim(self, *, wait: float = 0.0, lease_s: float = DEFAULT_LEASE_S) -> Job | None:
        """Claim one job in this queue's kind order, or None when the queue is empty."""
        claim = self.claim_raw(wait=wait, lease_s=lease_s)
        return self._job(claim) if claim else None

    def claim_raw(
        self,
        *,
        wait: float = 0.0,
        lease_s: float = DEFAULT_LEASE_S,
        worker: str | None = None,
        host: str | None = None,
    ) -> Claim | None:
        """The wire claim (payload still encoded), for loops that settle through the plane.

        The claim asks for this queue's kind and current temperature; a claimed job advances
        the anneal schedule. It names this box's host id (or `host`), so jobs whose objects
        live in this box's tier come here first (docs/objects.md, locality).
        """
        from .objects import host_id  # the object store, imported by the first claim

        self._first_use(submitting=False)
        annealing = self._annealing
        args = ClaimArgs(
            [self.name],
            worker or worker_identity(),
            lease_s=lease_s,
            kind=self.kind,
            temperature=annealing.current() if annealing else self.temperature,
            host=host or host_id(),
        )
        claim = claim_one(self.dispatch, args, wait_s=wait)
        if claim is not None and annealing is not None:
            annealing.claimed()
        return claim

    @_through_plane
    def _job(self, claim: Claim) -> Job:
        from . import spill

        self._held[claim.id] = claim.lease
        return Job(
            id=claim.id,
            payload=spill.loads(claim.payload),
            attempt=claim.attempt,
            queue=claim.queue,
            lease=claim.lease,
            timeout_s=claim.timeout_s,
        )

    @_through_plane
    def ack(self, job: Job, result: Any = None) -> None:
        from . import spill

        self.dispatch.ack(job.id, job.lease, spill.dumps(result))
        self._held.pop(job.id, None)

    def nack(self, job: Job, *, error: str, retry: bool = True) -> None:
        self.dispatch.nack(job.id, job.lease, error=str(error), retry=retry)
        self._held.pop(job.id, None)

    @contextmanager
    def working(self, *, wait: float = 0.0) -> Iterator[Job | None]:
        """Claim one job; ack on success, nack (retry) and re-raise on an exception."""
        job = self.claim(wait=wait)
        if job is None:
            yield None
            return
        try:
            yield job
        except BaseException as exc:
            import traceback  # a worker's, loaded at its first failure

            self.nack(job, error="".join(traceback.format_exception(exc)), retry=True)
            raise
        self.ack(job)

    def post(self, inv_id: str, value: Any = None, *, final: bool = False) -> int:
        """Append a VALUE frame (or END with final=True) to a job this queue claimed."""
        lease = self._held.get(inv_id)
        if lease is None:
            raise DispatchError(
                f"post refused: invocation '{inv_id}' was not claimed through this queue"
            )
        return self.dispatch.post(
            inv_id, "END" if final else "VALUE", codec.encode(value), lease=lease
        )

    def topic(self, name: str | None = None) -> Topic:
        return Topic(self.dispatch, self.name, name, allow_pickle=self.allow_pickle)
