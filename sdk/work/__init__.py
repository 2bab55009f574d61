"""The worker core, shared by `lakeshore-daemon` (process slots) and `run_worker` (inline slots).

core.py     WorkerCore: register, claim with prefetch, renew and heartbeat, kill delivery,
            settle (acks in batches), drain, mark the row gone
slot.py     what a slot is to the core (Slot, JobSink, Outcome) and how failures read
leases.py   when leases are renewed: a thread and a clock of their own
inline.py   InlineSlot: a body on a thread of the calling process (run_worker)
acks.py     group commit of successes
retry.py    unreachable vs refused, backoff, one retry helper
log.py      the core's events over `logging` when no structlog logger is given
"""

from .core import WorkerConfig, WorkerCore
from .slot import Outcome

__all__ = ["Outcome", "WorkerConfig", "WorkerCore"]
