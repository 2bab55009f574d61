"""`SyncQueue`: a named channel on a plane, with blocking verbs (producer and worker).

Split from queue.py (issue 38), which re-exports it beside its async sibling `Queue` and the
typed kinds. What a handle is (name, options, plane, derived handles, pickling) is its base
class, `QueueHandle` (queue_handle.py); this module holds the verbs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Concatenate, NoReturn, ParamSpec, TypeVar

from . import codec, protocols
from .anneal import check_temperature
from .envelope import Envelope
from .errors import DispatchError, InvalidArgument
from .plane.base import Plane
from .plane.base import claim as claim_one
from .queue_args import (
    misplaced_argument,
    refuse_arguments,
)
from .queue_handle import QueueHandle
from .queue_jobs import (
    DEFAULT_LEASE_S,
    Job,
    JobRuntime,
    Shipped,
    checked_runtime,
    encode_submit,
    job_runtime,
    result_of,
    worker_identity,
)
from .topic import Topic, iter_frames
from .types import STATES, Claim, ClaimArgs, Invocation, SubmitRequest, normalize_kind
from .workflow import with_after

if TYPE_CHECKING:
    from .mapping import MapResults
    from .runtime.spec import Runtime

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


class SyncQueue(QueueHandle):
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
        runtime: Runtime | None = None,
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
            runtime=runtime,
        )

    @classmethod
    def named(cls: type[_SQ], name: str, **kw: Any) -> _SQ:
        """Like the constructor, and lazy too; at first use it also ensures the queue row.

        The plain constructor trusts the plane (the first submit creates a missing queue as
        fifo). A named handle creates the row with its kind and elasticity when it is missing,
        and raises `InvalidArgument` at first use when the row's kind disagrees with it.
        """
        return cls(name, **kw).expect_row(declare=True, validate=True)

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
        runtime: Runtime | None = None,
        nodes: int = 1,
        hang_timeout_s: float | None = None,
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
        `runtime` (`dls.Runtime`, docs/runtime.md) is what the job brings to its worker: a
        folder, requirements, variables; without it, the queue's, else a code job ships the
        producer's own modules that it reaches. `nodes` > 1 runs the job on that many daemons
        at once, one part each, started together with their ranks and rank 0's address
        (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`: torch's env:// rendezvous);
        `resources` is per node. `hang_timeout_s`: once every part has reported no progress
        for that long, the job is a hang, for its daemons to end (at most 7 days; None: no
        hang is looked for).
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
            runtime=runtime,
            nodes=nodes,
            hang_timeout_s=hang_timeout_s,
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
        runtime: Runtime | Shipped | None = None,
        nodes: int = 1,
        hang_timeout_s: float | None = None,
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
            runtime=self._job_runtime(runtime),
            nodes=nodes,
            hang_timeout_s=hang_timeout_s,
        )
        return with_after(req, after, after_failure)

    def _job_runtime(self, runtime: Runtime | Shipped | None) -> JobRuntime:
        """What a job submitted here brings: `runtime` as given, else the queue's."""
        chosen = checked_runtime(runtime)
        return job_runtime(self.dispatch, chosen if chosen is not None else self.runtime)

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
        runtime: Runtime | None = None,
        nodes: int = 1,
        hang_timeout_s: float | None = None,
    ) -> list[str]:
        """Enqueue many in one transaction (one round trip over HTTP); `resources`,
        `runtime`, `nodes` (each job a gang that wide) and `hang_timeout_s` are each job's, as
        `submit` takes them. `after`: parents every job waits on;
        `after_each`: each job's own (one list, or None, per payload), which may name the `ids`
        (`dls.new_id()`, one per payload) of jobs earlier in the same batch."""
        self._first_use(submitting=True)
        protocol = self._protocol()
        brings = self._job_runtime(runtime)
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
                    runtime=brings,
                    nodes=nodes,
                    hang_timeout_s=hang_timeout_s,
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
        `submit` takes `priority`, `max_attempts`, `timeout_s`, `resources`, `runtime`,
        `nodes` and `hang_timeout_s`, each job's as `submit` takes them."""
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
        rank: int = 0,
    ) -> Iterator[Any]:
        """Decoded VALUE frames after `since`, live; END stops, ERROR raises. Of a multi-node
        job, rank 0's unless `rank` names another part (issue 47)."""
        return iter_frames(
            self.dispatch,
            inv_id,
            since=since,
            timeout=timeout,
            allow_pickle=self._pickles(allow_pickle),
            rank=rank,
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
