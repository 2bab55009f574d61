"""The vocabulary shared by every plane, the SDK, the server and the daemon.

Records are plain dataclasses of wire-level values (payloads stay encoded bytes), so the control
plane can move them without ever decoding a payload, and the HTTP transport can turn them into
msgpack maps field by field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from .errors import InvalidArgument

# Their home was here; names.py holds them so that Refs check a host without importing records.
from .names import HOST_PATTERN as HOST_PATTERN
from .names import MAX_NAME_LENGTH as MAX_NAME_LENGTH
from .names import NAME_PATTERN as NAME_PATTERN
from .names import check_host as check_host
from .names import check_name as check_name

if TYPE_CHECKING:
    from .storage import StorageRef

State = Literal[
    "queued",
    "running",
    "succeeded",
    "failed",
    "cancelled",
    "killed",
    "timeout",
    "scheduled",
    "waiting",
]
#: Not ended yet. `scheduled`: submitted with a delay, not claimable before its due time
#: (sdk/workflow.py); a claim or the sweep makes it queued then. `waiting`: submitted with
#: `after`, not claimable before its parents end (sdk/plane/dependencies.py).
LIVE_STATES: tuple[State, ...] = ("queued", "running", "scheduled", "waiting")
TERMINAL_STATES: tuple[State, ...] = ("succeeded", "failed", "cancelled", "killed", "timeout")
STATES: tuple[State, ...] = LIVE_STATES + TERMINAL_STATES

Kind = Literal["fifo", "filo", "boltzmann"]
KIND_ALIASES: dict[str, Kind] = {
    "fifo": "fifo",
    "priority": "fifo",
    "filo": "filo",
    "boltzmann": "boltzmann",
}

QueueState = Literal["active", "draining", "archived"]
QUEUE_STATES: tuple[QueueState, ...] = ("active", "draining", "archived")

FrameKind = Literal["VALUE", "ERROR", "END", "RESUME"]

#: Preemptions a job survives unless its submit or its queue says otherwise (issue 35).
DEFAULT_MAX_PREEMPTIONS = 20
MAX_PREEMPTIONS_LIMIT = 1000
#: Why an attempt ended, as the worker decided it before it signalled the job (`ended_by`):
#: a notice that the box is going away, a kill asked by cancel, the run's timeout, the job's
#: process dying, the job's own error, its worker lost with the lease, a command exiting 75;
#: and, on a daemon: the job's process out of host memory (`oom`), a job over its share of GPU
#: memory under `--enforce-gpu-memory` (`gpu_memory`), a GPU of the job's that failed
#: (`gpu_failed`: released as a preemption, not charged), the job's runtime that could not be
#: made (`runtime`: its bundle or its environment, issue 46).
END_CAUSES = (
    "notice",
    "cancel",
    "timeout",
    "died",
    "error",
    "daemon_lost",
    "exit75",
    "oom",
    "gpu_memory",
    "gpu_failed",
    "runtime",
)
#: The causes `end` accepts for each state it sets (the first is the default).
END_STATE_CAUSES = {
    "killed": ("cancel",),
    "timeout": ("timeout",),
    "failed": ("died", "oom", "gpu_memory", "runtime"),
}

DEFAULT_QUEUE = "default"
DEFAULT_QUEUE_DESCRIPTION = "Default queue (auto-created). Cannot be archived or deleted."
DEFAULT_NAMESPACE = "default"
#: The most rows one page of a list read (jobs, queue events) holds; at least 1.
MAX_LIST_LIMIT = 1000


def topic_channel(namespace: str, queue: str, name: str) -> str:
    """The journal channel of topic `name` of `queue` in `namespace`: what every plane posts
    to and reads from for that topic (an invocation's channel is its id)."""
    return f"topic:{namespace}/{queue}/{name}"


def normalize_kind(kind: str) -> Kind:
    """Resolve a kind name or alias; the message is the one the SDK page documents."""
    try:
        return KIND_ALIASES[kind]
    except (KeyError, TypeError):
        raise InvalidArgument(f"unknown queue kind '{kind}'; use fifo|filo|boltzmann") from None


def check_state(state: str) -> str:
    if state not in STATES:
        raise InvalidArgument(f"unknown state '{state}'; use {'|'.join(STATES)}")
    return state


def storable_text(text: str) -> str:
    """A worker's free text (an error, a traceback) as something every store can hold.

    Identifiers and fields a person chose are refused when they hold NUL or a lone surrogate
    (plane/queries.py); an error message is reported by code that is already failing, and
    refusing it would leave the attempt unsettled, so those characters are written as escapes.
    """
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def unsendable(value: Any, path: str) -> tuple[str, str] | None:
    """The first field the wire cannot carry, and why: an integer past 64 bits (msgpack's
    range) or a lone surrogate. Stored JSON objects (a provider's config, an elasticity's
    match) are checked with it too, so the embedded plane refuses what HTTP could not send."""
    if isinstance(value, dict):
        for key, item in value.items():
            found = unsendable(item, f"{path}.{key}" if path else str(key))
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = unsendable(item, f"{path}[{i}]")
            if found:
                return found
    elif isinstance(value, int) and not -(2**63) <= value < 2**64:
        shown = value if value.bit_length() <= 128 else f"a {value.bit_length()}-bit number"
        return f"field '{path}'", f"is {shown}, past the 64-bit integers the wire carries"
    elif isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"field '{path}'", "holds a lone surrogate, which is not Unicode text"
    return None


@dataclass(frozen=True)
class SubmitRequest:
    """One invocation to enqueue; `payload` is already encoded by the producer's codec."""

    payload: bytes
    key: str | None = None
    priority: float = 0.0
    max_attempts: int = 3
    timeout_s: float | None = None
    #: Locality: the host whose tier holds most of the bytes the payload's Refs point at (the
    #: producer computes it; the plane never decodes a payload). A claim from another host
    #: passes the job by for the queue's `admission.locality_wait_s`. None: no preference.
    host: str | None = None
    #: The invocation's id, minted by the producer (a fresh ULID): the same submit sent again
    #: after its answer was lost names the job it made, never a second one. None: the plane
    #: mints it.
    id: str | None = None
    #: Objects the submit made that the payload names only inside a pickle (a thunk's spilled
    #: array arguments): retention deletes them with the row, which it cannot find otherwise.
    objects: tuple[StorageRef, ...] = ()
    #: What the job needs to run (sdk/resources.py): None states nothing, and the queue's
    #: default applies; {} asks for nothing.
    resources: dict[str, Any] | None = None
    #: How many preemptions the job survives (issue 35); None: its queue's
    #: `admission.max_preemptions`, else DEFAULT_MAX_PREEMPTIONS.
    max_preemptions: int | None = None
    #: The map this job is one item (or chunk) of (sdk/mapping.py): `jobs ls --map ID` lists
    #: them. None: a job of its own.
    map_id: str | None = None
    #: Delays (sdk/workflow.py): not claimable for this many seconds after the plane accepts
    #: the submit, or before `at` (epoch seconds); the job waits in state `scheduled`. At most
    #: one of the two; neither (or a time already past): queued at once.
    delay_s: float | None = None
    at: float | None = None
    #: Dependencies (sdk/plane/dependencies.py): the invocations this one waits for, in state
    #: `waiting`: each must exist in the namespace, or come earlier in the same batch.
    after: tuple[str, ...] = ()
    #: What a parent that ends other than succeeded does to this job: "cancel" (it ends
    #: cancelled, naming the parent) or "run" (it runs once every parent has ended).
    after_failure: str = "cancel"
    #: The parents whose results its arguments take (`dls.output`): a subset of `after`, whose
    #: results a claim hands the worker with the job.
    inputs: tuple[str, ...] = ()
    #: What the job brings to its worker (issue 46, sdk/runtime/): its bundle's digest,
    #: requirements, variables and what shipped, as plain data; None: nothing.
    runtime: dict[str, Any] | None = None
    #: Issue 47: how many workers run the job at once, one part each (a gang, store/gangs.py);
    #: `resources` is per node. 1 is one box's job.
    nodes: int = 1
    #: Issue 47: a job whose parts (one, for one box's job) all report no progress for this
    #: many seconds is a hang, for its daemons to end; at most MAX_HANG_TIMEOUT_S. None: no
    #: hang is looked for.
    hang_timeout_s: float | None = None


@dataclass(frozen=True)
class Invocation:
    """The row behind an invocation id: the truth that `result` and `count` read."""

    id: str
    namespace: str
    queue: str
    state: State
    priority: float
    key: str | None
    attempt: int
    max_attempts: int
    timeout_s: float | None
    kill_requested: bool
    worker: str | None
    error: str | None
    result: bytes | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    #: What was asked (sdk/resources.py), after the udf's and the queue's defaults; {}: none.
    resources: dict[str, Any] = field(default_factory=dict)
    #: Where the attempt runs or ran: {worker, gpus: [{index, uuid, name, share}], ...}.
    placement: dict[str, Any] | None = None
    #: Why a queued job waits, for machines: resources | reserved_for:<id> |
    #: waiting_for_capacity | unschedulable; None when nothing was found to say.
    pending_reason: str | None = None
    #: Why no live daemon of its queue could ever run it, in words; None when one could.
    unschedulable_reason: str | None = None
    #: Attempts that a preemption ended (issue 35): counted in `attempt`, not against
    #: `max_attempts`; past `max_preemptions` the job fails.
    preemptions: int = 0
    max_preemptions: int = DEFAULT_MAX_PREEMPTIONS
    #: Why the last attempt that ended other than by success ended, as its worker decided it
    #: (END_CAUSES): kept once the job succeeds (a resumed job still says what interrupted
    #: it); None while no attempt ended that way.
    ended_by: str | None = None
    #: The job's last checkpoint: the encoded Ref of its state in durable storage (None: none).
    checkpoint: bytes | None = None
    #: Dependencies (sdk/plane/dependencies.py): the parents it was submitted after (read by
    #: id only), and how many of them have not ended yet; None: it names no parent.
    after: list[str] = field(default_factory=list)
    waiting_on: int | None = None
    #: What the job brings to its worker (SubmitRequest.runtime, issue 46): its bundle's digest,
    #: requirements, variables and what shipped; None: nothing.
    runtime: dict[str, Any] | None = None
    #: Issue 47: how many workers run it at once (a gang of parts, store/gangs.py); 1: one box.
    nodes: int = 1
    #: Issue 47: seconds without progress from any of its parts that make a hang
    #: (SubmitRequest.hang_timeout_s); None: none is looked for.
    hang_timeout_s: float | None = None
    #: A gang's newest attempt, as `Plane.invocation` reads it (None for one box's job, and in
    #: lists): {attempt, state, outcome, held, parts: [{rank, worker, addr, state}], failed}.
    gang: dict[str, Any] | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def public(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Claim:
    """A job handed to one worker; `lease` fences every settle and post of this attempt."""

    id: str
    namespace: str
    queue: str
    payload: bytes
    attempt: int
    lease: str
    lease_expires_at: float
    timeout_s: float | None
    priority: float = 0.0
    #: The server's HMAC of the payload (sdk/signing.py); None when the plane signs nothing.
    signature: str | None = None
    #: What the job asked for (sdk/resources.py), for the daemon to place it; {}: nothing.
    resources: dict[str, Any] = field(default_factory=dict)
    #: Issue 35: how many attempts before this one a preemption ended, and the checkpoint the
    #: job left (an encoded Ref), which `dls.run.last_checkpoint()` reads in the body.
    preemptions: int = 0
    checkpoint: bytes | None = None
    #: A token for the job's own code, in place of its worker's (plane/job_token.py): minted by
    #: a server that signs, None on an embedded plane.
    job_token: str | None = None
    #: The results of the parents its arguments name (`dls.output`), by parent id, as the
    #: parents stored them; only those that succeeded (sdk/plane/dependencies.py).
    inputs: dict[str, bytes | None] | None = None
    #: What the job brings (SubmitRequest.runtime): the daemon makes it ready before the run.
    runtime: dict[str, Any] | None = None
    #: Issue 47: the part of a gang this claim holds, `{rank, nodes, attempt}`; None for a
    #: job of one box. A part is held, not started: its worker waits for `Plane.gang` to say
    #: `started` before it runs anything (and lets it go when it says `ended`).
    gang: dict[str, int] | None = None
    #: Issue 47: how long the job's parts may all go without reporting progress before the
    #: daemon calls it a hang (SubmitRequest.hang_timeout_s); None: never.
    hang_timeout_s: float | None = None


@dataclass(frozen=True)
class GangState:
    """One attempt of a gang as one of its parts sees it (`Plane.gang`), store/gangs.py."""

    id: str
    #: The invocation's attempt the gang runs as.
    attempt: int
    nodes: int
    #: `holding` (parts held, nothing started), `started` (every part runs) or `ended` (every
    #: part stops: `outcome` says how).
    state: str
    #: How many parts are held or started.
    held: int
    #: The caller's part.
    rank: int
    #: Every part in rank order: {rank, worker, addr, port, state}; a part's state is held,
    #: started, acked, failed (it ended the attempt), stopped (ended with the gang), released
    #: (let go unstarted) or lost (its lease ran out while held).
    parts: list[dict[str, Any]] = field(default_factory=list)
    #: When a holding gang is let go if not complete (its queue's `admission.gang_wait_s`
    #: after its first part was held), epoch seconds.
    wait_until: float = 0.0
    #: Once ended: succeeded | failed | preempted | released | cancelled.
    outcome: str | None = None
    #: The part whose end ended a started attempt first: {rank, worker, why}; None if none did.
    failed: dict[str, Any] | None = None
    #: A preemption notice a part's box got (`Plane.gang_notice`): {rank, at, until}, where
    #: `until` is when that part's grace ends (epoch seconds); None while none came.
    noticed: dict[str, Any] | None = None
    #: When any part of a started gang last moved, as its daemons report it (epoch seconds;
    #: the start until one does): what `hang_timeout_s` is measured from.
    progress_at: float | None = None
    #: The part whose daemon found the gang hung first: {rank, at}; None while none did.
    hung: dict[str, Any] | None = None
    #: One more at every change (a part held or let go, an address or port posted, the start,
    #: a part's ack, the end): what `Plane.gang(..., since=)` waits past.
    version: int = 0


#: The states of a gang attempt (`GangState.state`).
GANG_STATES = ("holding", "started", "ended")
#: The most nodes one job may ask for.
MAX_NODES = 256
#: The longest `hang_timeout_s` a job may ask for (7 days): a longer silence is not a hang
#: to watch for but a job to look at.
MAX_HANG_TIMEOUT_S = 7 * 86400.0


class Ack(NamedTuple):
    """One attempt to settle as succeeded in a batch (`Plane.ack_many`)."""

    id: str
    lease: str
    result: bytes | None


#: How long a claimed job is the claimer's before the plane hands it to another.
DEFAULT_LEASE_S = 60.0
#: The longest lease a claim or a renewal may ask for (the server refuses more).
MAX_LEASE_S = 7 * 24 * 3600.0


class ClaimArgs(NamedTuple):
    """A claim's arguments: the one parameter of `Plane.claim_many` and `ack_and_claim` at
    every layer (planes, the store, the server's route), so each default is written here
    once. The server also holds them for a claim waiting for work, and hands a submit's jobs
    to such claims in the submit's transaction."""

    #: Queues to take from, in the order asked; () is the default queue.
    queues: Sequence[str]
    worker: str
    lease_s: float = DEFAULT_LEASE_S
    #: Up to this many jobs in one commit.
    limit: int = 1
    #: The order to take them in (fifo, priority, filo, boltzmann); None: the queue's own.
    kind: str | None = None
    #: A boltzmann claim's temperature.
    temperature: float = 1.0
    #: The claimer's host id (`objects.host_id()`): a job whose objects live in another
    #: host's tier is left to that host for its queue's `locality_wait_s`. None: a claimer
    #: on no host in particular, to whom every hinted job waits out its window.
    host: str | None = None
    #: What the claimer has free (sdk/resources.py `Free`): only a job whose request fits is
    #: handed over, one at a time while GPUs, CPUs or memory are counted. None: any job.
    free: dict[str, Any] | None = None
    #: Issue 47: the address other parts of a gang reach this claimer at (the host address it
    #: reaches the plane from, or its `--advertise-addr`): rank 0's is the gang's MASTER_ADDR.
    addr: str | None = None


@dataclass(frozen=True)
class Frame:
    seq: int
    kind: FrameKind
    value: bytes | None


@dataclass(frozen=True)
class QueueInfo:
    namespace: str
    name: str
    kind: str  # as created: fifo, priority, filo or boltzmann
    state: QueueState
    description: str
    elasticity: dict[str, Any] = field(default_factory=dict)
    admission: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float = 0.0
    #: The request of a job submitted here without one (sdk/resources.py); {}: none.
    resources: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkerInfo:
    id: str
    namespace: str
    name: str
    queues: list[str]
    host: str | None = None
    pid: int | None = None
    info: dict[str, Any] = field(default_factory=dict)
    load: dict[str, Any] = field(default_factory=dict)
    state: str = "alive"
    created_at: float = 0.0
    heartbeat_at: float = 0.0
