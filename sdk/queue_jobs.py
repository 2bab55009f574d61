"""A queue handle's jobs on the wire: a submit encoded, a claim's job, a result decoded.

Split from queue.py (issue 38), which re-exports every name here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

from . import codec
from .context import current_run
from .envelope import Envelope, Thunk
from .errors import DispatchError, InvalidArgument
from .resources import check_optional
from .types import DEFAULT_LEASE_S as DEFAULT_LEASE_S  # its home was here
from .types import Invocation, SubmitRequest
from .workflow import outputs_in

if TYPE_CHECKING:
    from .plane.base import Plane
    from .runtime.spec import Runtime


class Shipped(NamedTuple):
    """A runtime already put on the plane (a map's, made for its first job and reused)."""

    spec: dict[str, Any] | None


#: What a submit's job brings, made from its body (the bundle put on the plane first).
JobRuntime: TypeAlias = Callable[[Any], "dict[str, Any] | None"]


def checked_runtime(value: object, where: str = "runtime") -> Runtime | Shipped | None:
    """`runtime=` as given: None, a `dls.Runtime(...)` (or a map's `Shipped`); the SDK's
    runtime modules load only to check something else."""
    if value is None or isinstance(value, Shipped):
        return value
    from .runtime.resolve import check_runtime

    return check_runtime(value, where)


def job_runtime(plane: Plane, runtime: Runtime | Shipped | None) -> JobRuntime:
    """The runtime of a job submitted to `plane` with `runtime=` (None: the default, which ships
    a code job's own modules and nothing for data). A data job with no runtime asked for costs
    no import: sdk/runtime/ loads with the first job that ships something."""
    if isinstance(runtime, Shipped):
        return lambda body: runtime.spec

    def make(body: Any) -> dict[str, Any] | None:
        if runtime is None and not isinstance(body, (Envelope, Thunk)):
            return None
        from .runtime.resolve import runtime_for

        return runtime_for(plane, runtime, body)

    return make


@dataclass
class Job:
    """A claimed invocation; `lease` fences this attempt's ack, nack and posts."""

    id: str
    payload: Any
    attempt: int
    queue: str
    lease: str = field(default="", repr=False)
    timeout_s: float | None = field(default=None, repr=False)


def worker_identity() -> str:
    import socket  # a worker's: a producer's import does not pay for it

    return f"{socket.gethostname()}:{os.getpid()}"


def result_of(inv: Invocation, *, allow_pickle: bool = False, ref: bool = False) -> Any:
    """Decode a terminal invocation's result, or raise what ended it.

    A result is written by whichever worker held the lease, so by default it is decoded as plain
    values only: a pickled result would run that worker's code in the reader (docs/security.md).
    `ref=True` returns the result's `Ref` instead, without reading or decoding it.
    """
    from . import spill  # the object store, imported at the first payload (not with the SDK)

    if inv.state == "succeeded":
        if ref:
            return spill.ref_of(inv.result)
        if inv.result is None:
            return None
        return spill.loads(inv.result, allow_pickle=allow_pickle)
    raise DispatchError(
        f"invocation {inv.id} {inv.state}" + (f": {inv.error}" if inv.error else "")
    )


def encode_submit(
    payload: Any,
    envelope: Envelope | None,
    key: str | None,
    priority: float,
    max_attempts: int,
    timeout_s: float | None,
    run: str | None = None,
    protocol: int | Callable[[], int] = codec.PICKLE_PROTOCOL,
    resources: Mapping[str, Any] | None = None,
    max_preemptions: int | None = None,
    runtime: JobRuntime | None = None,
    nodes: int = 1,
    hang_timeout_s: float | None = None,
) -> SubmitRequest:
    """The wire request for one submit. `protocol` is the pickle protocol a thunk or udf call is
    written in, or the function that picks it, asked only if something is pickled. `resources`
    is checked here, so a mistake is refused before anything is encoded or sent. `runtime`
    makes what the job brings from its body (`job_runtime`)."""
    asked = check_optional(resources)
    from . import spill

    if envelope is not None and payload is not None:
        raise InvalidArgument("pass a payload or an envelope, not both")
    body: Any = envelope if envelope is not None else payload
    if isinstance(body, Thunk):
        body = Envelope.for_thunk(body)
    run = run or current_run()
    if isinstance(body, Envelope) and body.run is None and run is not None:
        body = replace(body, run=run)  # the job carries its run to the worker
    # Before anything is spilled: a runtime refused (too big, a bad workdir) leaves nothing.
    brings = runtime(body) if runtime is not None else None
    # Above the inline limit: a ref to a spilled copy. `host`: where the payload's objects
    # live, so a worker there claims it first (docs/objects.md, locality).
    with codec.pickle_protocol(protocol):
        data, host, owned = spill.dumps_located(body)
    # dls.output(id) arguments: the job waits on those parents and takes their results.
    inputs = outputs_in(body.args, body.kwargs) if isinstance(body, Envelope) else ()
    return SubmitRequest(
        after=inputs,
        inputs=inputs,
        payload=data,
        key=key,
        priority=priority,
        max_attempts=max_attempts,
        timeout_s=timeout_s if timeout_s is not None else getattr(body, "timeout_s", None),
        host=host,
        objects=owned,
        resources=asked,
        max_preemptions=max_preemptions,
        runtime=brings,
        nodes=nodes,
        hang_timeout_s=hang_timeout_s,
    )
