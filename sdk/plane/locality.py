"""Locality: a job whose objects live in one host's tier goes first to a worker on that host.

The producer says where (`SubmitRequest.host`: the host holding most of the bytes its Refs
point at, `dreamlake.lakeshore.locality`); the plane never decodes a payload to find out. At
submit the store fixes the job's window, `locality_until = now + admission.locality_wait_s`, as
it fixes `deadline_at` from `deadline_cutoff_s`; every claim then takes the job at once when
the claimer names the same host, or once the window has ended, and passes it by otherwise. A
job hinted at a host that has no worker still runs: anyone takes it after the window, and
fetches its objects. Neither the lease, the deadline, retries nor the claim order change: a job
held for another host is skipped as a job waiting out its retry backoff is.

What it costs: a job without a hint (or on a queue whose wait is 0) has NULL in the window
column, and the claim's extra test is a comparison on the row it already reads; the submit
reads the queue row it already reads. A claim also asks when the next window ends (one probe
of a partial index of held rows, in the statement that reads its queue row), so that, finding
nothing, it wakes then rather than at its safety poll.
"""

from __future__ import annotations

from collections.abc import Sequence

from dreamlake.lakeshore.types import QueueInfo

from .wakeup import Waker, work_key

#: The wait when a queue sets none: about what fetching a big object (64 MiB from S3 or through
#: the plane) costs, so a job waits for its host at most about as long as a miss would cost it.
#: A backlog older than this goes to whoever is free, which keeps every host busy.
DEFAULT_WAIT_S = 0.5
#: The longest a queue may hold a job for one host: longer would starve the others, and a job
#: that must run on one box belongs on a queue only that box serves.
MAX_WAIT_S = 3600.0


def wait_s(info: QueueInfo) -> float:
    """The queue's `admission.locality_wait_s`, or the default."""
    value = info.admission.get("locality_wait_s")
    return DEFAULT_WAIT_S if value is None else float(value)


def window_end(info: QueueInfo, host: str | None, now: float) -> float | None:
    """Until when a job hinted at `host` is held for it; None when it is not held at all."""
    if host is None:
        return None
    wait = wait_s(info)
    return now + wait if wait > 0 else None


def wake_at_window(waker: Waker, ns: str, queues: Sequence[str], at: float | None) -> None:
    """After a claim found nothing: wake this process's claims on `queues` `at` the end of
    their next window (None: no job is held), since a job that becomes claimable by time alone
    sends no wake-up. The claim read `at` with its queue row (`queue_for_claim`) or, when it
    had that row already, on its own (`locality_next`)."""
    if at is not None:
        waker.notify_at(float(at), work=[work_key(ns, q) for q in queues])
