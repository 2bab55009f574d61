"""SIGTERM / SIGINT as a restorable context manager, for the long-running processes: the
daemon drains on the first and stops at once on the second; the controller stops on either.

Installed inside a `with` (never in a constructor) and restored on exit, so a test or a program
embedding a daemon in a thread keeps its own handlers; `install=False` opts out entirely.

A Python handler runs in the main thread between two of its bytecodes, so it may run while that
thread holds a lock the stop needs (an Event's, a log stream's): the controller once hung for
good that way, its handler setting the Event its main loop was waiting in. Here the handler
only writes the signal's number to a pipe, and a thread of its own reads it and calls
`on_first` or `on_second`, which may then take any lock.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

#: The signals that ask a daemon to stop: systemd and `kill` send SIGTERM, a terminal SIGINT.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: On the way out, how long the relay may take to act on signals already received.
RELAY_JOIN_S = 10.0


@contextlib.contextmanager
def stop_signals(
    on_first: Callable[[int], None],
    on_second: Callable[[int], None],
    *,
    install: bool = True,
) -> Iterator[None]:
    """Call `on_first` on the first stop signal and `on_second` on any later one, from a
    thread of their own, in the order the signals came.

    Does nothing when `install` is False or when not on the main thread (Python only lets the
    main thread set handlers; an embedded daemon is stopped by calling its methods instead).
    Signals received inside the block are acted on before it is left.
    """
    if not install or threading.current_thread() is not threading.main_thread():
        yield
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)

    def handle(signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(OSError):  # full: thousands of signals pending already
            os.write(write_end, bytes([signum]))

    def relay() -> None:
        received = 0
        while data := os.read(read_end, 64):  # empty once the write end is closed
            for signum in data:
                received += 1
                (on_first if received == 1 else on_second)(signum)

    relay_thread = threading.Thread(target=relay, name="lakeshore-signals", daemon=True)
    relay_thread.start()
    previous: dict[int, Any] = {}
    try:
        for sig in STOP_SIGNALS:
            previous[sig] = signal.signal(sig, handle)
        yield
    finally:
        for restored, handler in previous.items():
            signal.signal(restored, handler)
        os.close(write_end)
        relay_thread.join(RELAY_JOIN_S)
        os.close(read_end)
