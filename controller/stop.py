"""A stop request that a signal handler can make without taking a lock.

A Python signal handler runs in the main thread between two of its bytecodes, so it may run
while that thread holds a `threading` lock: `Event.set()` from the handler while the main
thread was inside `Event.wait()` tried to take the Event's lock a second time, and the
controller hung for good after SIGINT (seen under load in the docs test). Here the handler
only flips a flag and writes a byte to a pipe; the main loop sleeps in `select` on that pipe.
"""

from __future__ import annotations

import contextlib
import os
import select


class StopSignal:
    """`set()` is safe in a signal handler; `wait(timeout)` sleeps until it or the timeout."""

    def __init__(self) -> None:
        self._requested = False
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)

    def set(self) -> None:
        self._requested = True
        with contextlib.suppress(OSError):  # full (a wake-up is pending already) or closed
            os.write(self._write, b"!")

    def is_set(self) -> bool:
        return self._requested

    def wait(self, timeout: float | None = None) -> bool:
        if not self._requested:
            select.select([self._read], [], [], timeout)
        return self._requested

    def close(self) -> None:
        for fd in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(fd)
