"""The child's end of its pipe while jobs run: checkpoints up, notices down (issue 35).

Before, the child read its pipe only between jobs. A checkpoint needs an answer while the body
runs, and a preemption notice must reach a body that never returns to the loop; so one thread
of the child reads the pipe for its whole life and routes what comes: a run message (with the
attempt's `AttemptLink`, made here, so a notice that follows the run on the pipe always finds
its link) to the main loop, a "checkpointed" answer to the body waiting for it, a "preempt" to
the running attempt's link. Writes from the body's threads and the main loop share one lock.

The parent's side of the same messages is in slots.py (`ProcessSlot._checkpoint`, `notice`).
"""

from __future__ import annotations

import functools
import queue
import threading
from multiprocessing.connection import Connection
from typing import Any

from dreamlake.lakeshore.attempt import AttemptLink
from dreamlake.lakeshore.errors import ERRORS_BY_CODE, DispatchError

#: A run message and the link of its attempt, or None: the parent closed the pipe, exit.
Job = tuple[tuple[Any, ...], AttemptLink] | None


class ChildPipe:
    """The child's pipe, read by a thread of its own."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._send_lock = threading.Lock()
        self._jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._answers: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._link: AttemptLink | None = None
        threading.Thread(target=self._read, name="lakeshore-child-pipe", daemon=True).start()

    def send(self, message: Any) -> None:
        with self._send_lock:
            self._conn.send(message)

    def next_job(self) -> Job:
        """The next run message and its attempt's link (None: exit)."""
        return self._jobs.get()

    def _read(self) -> None:
        while True:
            try:
                message = self._conn.recv()
            except (EOFError, OSError):
                message = None
            if message is None:
                self._jobs.put(None)
                self._answers.put(("", (None, ("unavailable", "the daemon closed the pipe"))))
                return
            self._route(message)

    def _route(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "run":
            self._link = AttemptLink(
                functools.partial(self._save, message[1]),
                message[5],
                progress=functools.partial(self.send, ("progress", message[1], None)),
            )
            self._jobs.put((message, self._link))
        elif kind == "checkpointed":
            self._answers.put((message[1], message[2]))
        elif kind == "preempt" and self._link is not None:
            self._link.notice(message[1])

    def _save(self, inv_id: str, data: bytes) -> bytes:
        """Send a checkpoint up and wait for the parent's answer (it stores, then answers)."""
        self.send(("checkpoint", inv_id, data))
        while True:
            answered, (blob, error) = self._answers.get()
            if answered in (inv_id, ""):
                break  # ("", ...): the pipe is gone
        if error is not None:
            code, message = error
            raise ERRORS_BY_CODE.get(code, DispatchError)(message)
        assert isinstance(blob, bytes)
        return blob
