"""SIGTERM / SIGINT as a restorable context manager: first signal drains, second stops now.

Installed by `Daemon.run()` inside a `with` (never in a constructor) and restored on exit, so a
test or a program embedding the daemon in a thread keeps its own handlers; `install=False` opts out
entirely. Handlers only flip flags and wake the main loop: all real work happens in the loop.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

#: The signals that ask a daemon to stop: systemd and `kill` send SIGTERM, a terminal SIGINT.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def stop_signals(
    on_first: Callable[[int], None],
    on_second: Callable[[int], None],
    *,
    install: bool = True,
) -> Iterator[None]:
    """Call `on_first` on the first stop signal and `on_second` on any later one.

    Does nothing when `install` is False or when not on the main thread (Python only lets the
    main thread set handlers; an embedded daemon is stopped by calling its methods instead).
    """
    if not install or threading.current_thread() is not threading.main_thread():
        yield
        return
    received = 0

    def handle(signum: int, frame: FrameType | None) -> None:
        nonlocal received
        received += 1
        (on_first if received == 1 else on_second)(signum)

    previous: dict[int, Any] = {}
    try:
        for sig in STOP_SIGNALS:
            previous[sig] = signal.signal(sig, handle)
        yield
    finally:
        for restored, handler in previous.items():
            signal.signal(restored, handler)
