"""What every plane offers: the embedded `Dispatch` and `HttpDispatch` alike.

The SDK's queues, the worker loop and the daemon talk to a `Plane` and never ask which one it is;
the conformance suite runs the same tests against each.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from dreamlake.lakeshore.errors import DispatchError
from dreamlake.lakeshore.types import (
    Ack,
    Claim,
    ClaimArgs,
    Frame,
    GangState,
    Invocation,
    QueueInfo,
    SubmitRequest,
    WorkerInfo,
)

if TYPE_CHECKING:
    # Only the admin verbs' answers: a producer's import loads neither (json, zoneinfo, croniter's
    # shapes: a tenth of `import dreamlake.lakeshore`).
    from .providers import ProviderInfo
    from .schedules import ScheduleInfo


@runtime_checkable
class Pushes(Protocol):
    """A plane that can tell a worker of news at once (an HTTP plane with a channel, issue
    48): `push(kind)` is called on a thread of the plane's, and must not block."""

    def on_push(self, worker: str, push: Callable[[str], None]) -> None: ...


@runtime_checkable
class Plane(Protocol):
    namespace: str

    # producers
    def submit(
        self, queue: str, requests: Sequence[SubmitRequest], *, wait_s: float = 0.0
    ) -> list[str]:
        """Enqueue; a queue with `on_full: block` makes this wait up to wait_s for room."""

    def submit_and_wait(
        self, queue: str, request: SubmitRequest, *, wait_s: float, block_s: float = 0.0
    ) -> Invocation:
        """Enqueue one and wait up to wait_s for it to end: an RPC in one round trip."""

    def invocation(self, inv_id: str, *, wait_s: float = 0.0) -> Invocation:
        """The invocation row; with wait_s, first wait up to that long for a terminal state."""

    def count(self, queue: str, state: str = "queued") -> int: ...
    def cancel(self, inv_id: str, *, kill: bool = False) -> bool: ...
    def frames(
        self, channel: str, *, since: int = -1, wait_s: float = 0.0, rank: int = 0
    ) -> list[Frame]:
        """Frames after `since`; with wait_s, wait for one (or for the invocation to end).
        `rank`: of a gang's job (issue 47), that part's own output; 0 is the job's."""

    def post(
        self,
        channel: str,
        kind: str,
        value: bytes | None,
        *,
        lease: str | None = None,
        post_id: str | None = None,
    ) -> int: ...
    def topic_channel(self, queue: str, name: str) -> str: ...

    # workers
    def claim_many(self, args: ClaimArgs, *, wait_s: float = 0.0) -> list[Claim]:
        """Up to `args.limit` jobs in one durable write; waits up to wait_s for the first.
        What a claim asks for (queues, order, host, what is free) is `ClaimArgs`."""

    def ack_and_claim(
        self, acks: Sequence[Ack], args: ClaimArgs, *, wait_s: float = 0.0
    ) -> tuple[list[DispatchError | None], list[Claim]]:
        """`ack_many(acks)`, then `claim_many(args)`: a worker's one call per job. The acks
        commit before any wait (with the claim, when a job is there); per ack, the refusal
        or None, and the claims."""

    def ack(self, inv_id: str, lease: str, result: bytes | None) -> None: ...
    def ack_many(self, acks: Sequence[Ack]) -> list[DispatchError | None]:
        """Settle many as succeeded in one durable write; per ack, the refusal or None."""

    def nack(self, inv_id: str, lease: str, *, error: str, retry: bool = True) -> str: ...
    def end(
        self, inv_id: str, lease: str, *, state: str, error: str, cause: str | None = None
    ) -> None:
        """End an attempt the worker ended (killed, timeout) or whose process died (failed);
        `cause` tells an out-of-memory or over-GPU-memory end from a plain death."""

    def release(
        self, inv_id: str, lease: str, *, outcome: str = "unrun", cause: str = "notice"
    ) -> bool:
        """Give a claimed job back: `unrun` leaves its attempt unspent; `preempted` counts a
        preemption for `cause` (issue 35) and fails a job past its max_preemptions (False)."""

    def note_cause(self, inv_id: str, lease: str, cause: str) -> bool:
        """Record why the worker is about to end a running attempt (types.END_CAUSES), before
        it signals the job; False if the attempt is no longer this lease's."""

    def checkpoint(self, inv_id: str, lease: str, checkpoint: bytes) -> bytes | None:
        """Make `checkpoint` (the encoded Ref of the state in durable storage) the job's last,
        under the attempt's lease; returns the one it replaced, for the caller to delete."""

    def place(self, inv_id: str, lease: str, placement: dict[str, Any]) -> None:
        """Record where the attempt holding `lease` runs (its worker, GPUs): issue 34."""

    def renew(self, leases: Sequence[str], lease_s: float) -> dict[str, bool]: ...

    # job runtimes (issue 46): bundles, as manifests over content-addressed blobs
    def runtime_missing(self, shas: Sequence[str]) -> list[str]:
        """Which of the blobs named `shas` (sha256 hex) this namespace does not hold."""

    def put_runtime_blobs(self, blobs: Sequence[tuple[str, bytes]]) -> int:
        """Store (sha256, bytes) pairs in one commit; how many were new."""

    def put_runtime_manifest(self, manifest: dict[str, Any]) -> str:
        """Store a bundle's manifest (its blobs first); its digest."""

    def runtime_manifest(self, digest: str) -> dict[str, Any]: ...
    def runtime_blob(self, sha: str) -> bytes: ...
    def gang(
        self, inv_id: str, lease: str, *, wait_s: float = 0.0, since: int | None = None
    ) -> GangState:
        """Issue 47: the gang attempt the part under `lease` belongs to (holding, started,
        ended); with wait_s, first wait up to that long for it to change past version `since`
        (None: the version this call first finds): a part held or let go, an address or port
        posted, the start, a part's ack, the end. A daemon passes the `version` it last read,
        so that no change between two calls is missed."""

    def gang_ready(
        self, inv_id: str, lease: str, *, addr: str | None = None, port: int | None = None
    ) -> GangState:
        """Say where the part under `lease` listens (rank 0's port: the gang's MASTER_PORT),
        while its attempt is live; every part's `gang` wait wakes."""

    def gang_progress(self, inv_id: str, lease: str, *, hung: bool = False) -> GangState:
        """The child of the started part under `lease` moved: the gang's `progress_at`.
        `hung`: its daemon found the gang hung; every part's `gang` wait wakes with `hung`."""

    def gang_notice(self, inv_id: str, lease: str, *, until: float) -> GangState:
        """The box of the started part under `lease` got a preemption notice, its grace ending
        at `until` (epoch seconds): every part's `gang` wait wakes with `noticed`."""

    # queues
    def create_queue(self, name: str, **fields: Any) -> QueueInfo: ...
    def queue(self, name: str) -> QueueInfo: ...
    def queues(self, *, state: str | None = None) -> list[QueueInfo]: ...
    def patch_queue(self, name: str, changes: dict[str, Any]) -> QueueInfo: ...
    def set_queue_state(self, name: str, action: str) -> QueueInfo: ...
    def delete_queue(self, name: str, *, force: bool = False) -> None: ...
    def events(self, name: str, *, limit: int = 50) -> list[dict[str, Any]]: ...
    def stats(self, name: str) -> dict[str, Any]: ...

    # worker rows
    def register_worker(self, name: str, **fields: Any) -> WorkerInfo: ...
    def heartbeat(
        self, worker_id: str, load: dict[str, Any], *, state: str = "alive"
    ) -> WorkerInfo: ...
    def worker(self, ref: str) -> WorkerInfo: ...
    def workers(self) -> list[WorkerInfo]: ...
    def update_worker_queues(
        self, ref: str, *, add: Sequence[str] = (), remove: Sequence[str] = ()
    ) -> WorkerInfo: ...
    def set_worker_state(self, ref: str, state: str) -> WorkerInfo: ...

    # jobs (`lakeshore jobs`, the dashboard)
    def invocations(
        self,
        *,
        queue: str | None = None,
        state: str | None = None,
        limit: int = 50,
        before: str | None = None,
        map_id: str | None = None,
    ) -> list[Invocation]:
        """Newest first, filtered; rows carry no result bytes (read one by id for that).
        `map_id`: the jobs of one map (sdk/mapping.py) instead of the queue / state filters."""

    def retry(self, inv_id: str) -> Invocation:
        """Requeue a failed / killed / timeout invocation as a new attempt of the same id."""

    # named provider configs (`lakeshore providers`, the controller)
    def add_provider(self, name: str, kind: str, config: dict[str, Any]) -> ProviderInfo: ...
    def providers(self) -> list[ProviderInfo]: ...
    def provider(self, name: str) -> ProviderInfo: ...
    def delete_provider(self, name: str) -> None: ...

    # cron schedules (`dls.schedule`, `lakeshore schedules`; sdk/plane/schedules.py)
    def put_schedule(
        self,
        name: str,
        *,
        cron: str,
        queue: str,
        template: SubmitRequest,
        tz: str = "UTC",
        catchup: str = "latest",
        overlap: str = "allow",
    ) -> ScheduleInfo:
        """Create or replace a schedule; a replaced one keeps its state, counts and (same
        cron and zone) its next slot."""

    def schedules(self) -> list[ScheduleInfo]: ...
    def schedule(self, name: str) -> ScheduleInfo: ...
    def set_schedule_state(self, name: str, action: str) -> ScheduleInfo:
        """`pause` or `resume` (see sdk/plane/schedules.py for what a resume fires)."""

    def delete_schedule(self, name: str) -> None: ...
    def run_schedule(self, name: str, run_id: str | None = None) -> str:
        """Submit the schedule's job now (key `schedule:<name>:manual:<run_id>`; a run sent
        again with its `run_id` returns the same job), leaving its next slot where it was."""

    def close(self) -> None: ...


def claim(plane: Plane, args: ClaimArgs, *, wait_s: float = 0.0) -> Claim | None:
    """The next job or None: `claim_many` of one, on any plane (a helper, not a verb: the
    plane has one claim, and this is its one-job form)."""
    got = plane.claim_many(args._replace(limit=1), wait_s=wait_s)
    return got[0] if got else None
