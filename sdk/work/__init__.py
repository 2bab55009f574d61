"""The worker core, shared by `lakeshore-daemon` (process slots) and `run_worker` (inline slots).

core.py     WorkerCore: register, renew and heartbeat, kill delivery, drain, mark the row gone
claiming.py the claim loop: room, claims with prefetch, the buffer, handing claims to slots
settling.py frames and settles (acks in batches) reaching the plane
config.py   WorkerConfig, the Notifier, timings and exit codes (re-exported by core.py)
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
