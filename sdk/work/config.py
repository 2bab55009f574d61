"""What a worker core is told: its config, its supervisor (`Notifier`), its timings and exit codes.

Split from core.py so that a reader of the loops finds the knobs in one place; core.py
re-exports every name here, where callers import them from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from dreamlake.lakeshore.types import DEFAULT_LEASE_S, Claim

#: An idle claim waits this long on the plane's wake-up before the loop looks around again
#: (membership, drain): the bound on how late an idle worker notices either.
CLAIM_WAIT_S = 1.0
#: The worker row (membership and state) is re-read at least this often while claiming.
MEMBERSHIP_POLL_S = 1.0
#: The worker row's heartbeat, at most this far apart (the plane calls a worker stale at 120 s).
HEARTBEAT_MAX_S = 10.0
#: While draining, systemd is asked for this much more than the time left, at least this often.
EXTEND_SLACK_S = 30.0
EXTEND_EVERY_S = 5.0
#: Grace before SIGKILL when stopping at once (second signal, crashed side task).
STOP_NOW_GRACE_S = 1.0
#: Attempts at marking the row gone on the way out; a row left alive just goes stale.
GONE_ATTEMPTS = 5
#: On the way out, how long the last acks may take to reach the plane.
ACK_FLUSH_S = 30.0

EXIT_OK = 0
EXIT_CRASHED = 1
EXIT_CONFIG = 2
#: A burst run gave up on a plane it could not reach (`give_up_unreachable_s`).
EXIT_UNREACHABLE = 3
#: How long a burst run waits for a plane it cannot reach before it gives up.
BURST_GIVE_UP_S = 30.0

#: Claims `limit` jobs from `queues`, waiting up to `wait_s` for the first (plane.claim_many
#: by default; a queue handle claims with its own kind, temperature and anneal schedule).
Claimer = Callable[[Sequence[str], int, float], list[Claim]]


class ConfigError(Exception):
    """The worker cannot start as asked (GPU plan, handler); the daemon exits 2 with it."""


class Notifier(Protocol):
    """Where the core reports its lifecycle: systemd's notify socket for the daemon."""

    @property
    def watchdog_interval_s(self) -> float | None: ...

    def ready(self, status: str) -> bool: ...
    def status(self, status: str) -> bool: ...
    def watchdog(self) -> bool: ...
    def stopping(self, status: str) -> bool: ...
    def extend_timeout(self, seconds: float) -> bool: ...


class SilentNotifier:
    """No supervisor to tell: `run_worker` in somebody's program."""

    watchdog_interval_s: float | None = None

    def ready(self, status: str) -> bool:
        return False

    status = stopping = ready

    def watchdog(self) -> bool:
        return False

    def extend_timeout(self, seconds: float) -> bool:
        return False


@dataclass(frozen=True)
class WorkerConfig:
    name: str
    #: The queues served; `()` is the default queue (as the plane stores it), None every queue
    #: of the namespace (`run_worker(plane)`), re-listed at the membership poll.
    queues: tuple[str, ...] | None = ()
    concurrency: int = 1
    #: Jobs claimed ahead of a free slot, so a stream of short jobs costs one claim per batch.
    #: 0 (the default) claims only for free slots: a long job never holds another one hostage.
    prefetch: int = 0
    burst: bool = False
    #: In burst mode, how long a claim waits for a job before the queues count as empty.
    burst_wait_s: float = 0.0
    #: Stop claiming after this many jobs (`run_worker(once=True)` is 1), then drain.
    max_jobs: int | None = None
    lease_s: float = DEFAULT_LEASE_S
    #: The order jobs are claimed in; None: each queue's own kind.
    kind: str | None = None
    drain_timeout_s: float = 60.0
    kill_grace_s: float = 10.0
    claim_wait_s: float = CLAIM_WAIT_S
    storage: str | None = None
    #: The control plane's payload-signing key: with it, a claim whose signature does not
    #: verify is refused before its payload is decoded (sdk/signing.py).
    signing_key: bytes | None = None
    #: A refused claim (an unknown queue, a token without rights) raises out of `run()` instead
    #: of being logged and retried: right for a library call, wrong for a fleet's daemon.
    raise_refusals: bool = False
    #: After a preemption notice, how long running jobs get to checkpoint and stop before they
    #: are killed and released as preempted (never past the notice's own deadline).
    preempt_grace_s: float = 30.0
    #: Stop (EXIT_UNREACHABLE) once registering or claiming has found the plane unreachable for
    #: this long; None rides out any outage. Burst runs set it: somebody waits for them to end.
    give_up_unreachable_s: float | None = None
