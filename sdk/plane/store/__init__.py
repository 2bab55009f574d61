"""The plane's semantics, written once over any connector.

Every rule of the invocation model lives in this package or in `sql/queries.sql`: idempotent
keys, claim order, leases and their fencing, retries with backoff, cancel and kill, the journal.
The embedded `Dispatch`, the HTTP control plane and the Postgres scale-out all call `SqlStore`;
none of them re-implements a rule, and nothing outside sdk/plane opens a transaction. Payloads
and results stay opaque bytes: the store never decodes them.

`SqlStore` is one facade over a module per concern:

    base.py         the connector, constants, the queue-row and event writes everyone shares
    records.py      validation of what callers send; rows turned into records
    namespaces.py   namespaces and orgs
    auth.py         tokens (stored hashed) and what a token may touch
    leader.py       leadership leases (the controller's election over HTTP)
    providers.py    named provider configs
    workers.py      worker rows
    queues.py       queue rows, events, stats (which count members: QueueStore is a WorkerStore)
    invocations.py  submit (which may create its queue), read, cancel, list, retry
    settle.py       ack, nack, end, release, lease renewal, the expired-lease sweep
    claims.py       claim: which job a claimer takes, steal and locality, the sweep on the way
    frames.py       the journal
    views.py        read models: the dashboard's, the controller's, /metrics'
    retention.py    trimming ended invocations
    runtimes.py     job runtimes: bundles (manifests over blobs) and a submit's runtime
    placement.py    resources: a job's request, a queue's default, where an attempt runs
    schedules.py    cron schedules, and firing them (every sweep and claim fires what is due)
"""

from __future__ import annotations

from .auth import AuthStore
from .base import (
    ELASTICITY_KINDS,
    FRAME_PAGE,
    MAX_BATCH,
    ON_FULL,
    RETRY_BASE_S,
    RETRY_CAP_S,
    SWEEP_EVERY_S,
    WORKER_STALE_S,
    new_id,
    topic_channel,
)
from .frames import FrameStore
from .leader import LeaderStore
from .placement import PlacementStore
from .providers import ProviderStore
from .records import boltzmann_level, check_admission, check_elasticity
from .retention import RetentionStore
from .schedules import ScheduleStore
from .views import ViewStore

__all__ = [
    "ELASTICITY_KINDS",
    "FRAME_PAGE",
    "MAX_BATCH",
    "ON_FULL",
    "RETRY_BASE_S",
    "RETRY_CAP_S",
    "SWEEP_EVERY_S",
    "WORKER_STALE_S",
    "SqlStore",
    "boltzmann_level",
    "check_admission",
    "check_elasticity",
    "new_id",
    "topic_channel",
]


class SqlStore(
    ScheduleStore,
    FrameStore,
    AuthStore,
    LeaderStore,
    ProviderStore,
    ViewStore,
    RetentionStore,
    PlacementStore,
):
    """The whole store: one object per database, shared by every caller of the plane."""
