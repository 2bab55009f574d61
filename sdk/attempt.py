"""What a running attempt shares with its worker (issue 35): checkpoints and the preemption notice.

A body reaches these through `dls.run` (`checkpoint`, `last_checkpoint`, `preempting`,
`on_preempt`, `preempt_deadline`); the worker that runs it (a daemon's child process, or
`run_worker`'s thread) builds one `AttemptLink` per attempt and passes it to `run_body`.

Why a link and not the plane: in a daemon the body runs in a child that holds no lease, token or
connection. `save` hands the encoded state to whoever does (the daemon, over the child's pipe;
`run_worker`'s core, directly), which writes it to durable storage and its Ref to the row under
the lease, and returns once both are durable. The notice comes the other way: the worker calls
`notice(deadline)` from any thread, and the body sees it as an event, a callback, a deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Final

from .errors import DispatchError

#: Stores one encoded checkpoint and returns the encoded Ref the row now holds; raises a
#: `DispatchError` naming what went wrong (the previous checkpoint then stays).
Save = Callable[[bytes], bytes | None]
#: A body's `dls.run.progress()` passed on at most this often: its worker needs to know the job
#: moves (issue 47's hang_timeout_s, seconds at the least), not every step of a tight loop.
PROGRESS_EVERY_S: Final = 1.0


class Preempted(DispatchError):
    """Raised by a body to say it stopped because its box is going away, not because it failed:
    the attempt goes back to the queue as a preemption (not charged to `max_attempts`), and the
    next attempt starts from the last checkpoint."""

    code = "preempted"

    def __init__(
        self, message: str = "the job stopped for a preemption notice", *, cause: str = "notice"
    ) -> None:
        super().__init__(message)
        #: Why (types.END_CAUSES): a notice, or a shell command that exited 75.
        self.cause = cause


class AttemptLink:
    """One attempt's checkpoints and preemption notice, shared by the body and its worker."""

    def __init__(
        self, save: Save, last: bytes | None, progress: Callable[[], object] | None = None
    ) -> None:
        self._save = save
        self._progress = progress
        self._progress_at = 0.0
        #: The encoded Ref of the last checkpoint (the claim's, then each one saved).
        self.last = last
        self.preempting = threading.Event()
        self.deadline: float | None = None
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], Any]] = []

    def save(self, data: bytes) -> None:
        self.last = self._save(data)

    def progress(self) -> None:
        """The body says it moves: passed to the worker, at most once a PROGRESS_EVERY_S."""
        now = time.monotonic()
        if self._progress is None or now - self._progress_at < PROGRESS_EVERY_S:
            return
        self._progress_at = now
        self._progress()

    def notice(self, deadline: float | None) -> None:
        """The box is going away by `deadline` (epoch seconds; None: unknown): set the event,
        then run the callbacks registered so far, once each, on this thread."""
        with self._lock:
            if self.preempting.is_set():
                return
            self.deadline = deadline
            self.preempting.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            _call(fn)

    def on_preempt(self, fn: Callable[[], Any]) -> None:
        """Call `fn` when a notice comes; at once (on this thread) if one came already."""
        with self._lock:
            if not self.preempting.is_set():
                self._callbacks.append(fn)
                return
        _call(fn)


def _call(fn: Callable[[], Any]) -> None:
    """A callback's failure is the body's to see in its own code, never the notifier's."""
    try:
        fn()
    except Exception:  # the notice reaches every callback whatever one of them does
        import logging

        logging.getLogger(__name__).exception("an on_preempt callback raised")
