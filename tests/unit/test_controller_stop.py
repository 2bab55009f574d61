"""The controller's stop request: safe to make from a signal handler (controller/stop.py)."""

from __future__ import annotations

import os
import signal
import threading

from dreamlake.lakeshore.controller.stop import StopSignal


def test_a_signal_handler_ends_a_wait_in_progress() -> None:
    stop = StopSignal()
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: stop.set())
    timer = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGUSR1))
    try:
        timer.start()
        assert stop.wait(30.0) is True
        assert stop.is_set()
    finally:
        timer.join()
        signal.signal(signal.SIGUSR1, previous)
        stop.close()


def test_a_wait_times_out_unset_and_a_set_before_it_returns_at_once() -> None:
    stop = StopSignal()
    try:
        assert stop.wait(0.01) is False
        stop.set()
        stop.set()  # twice is fine
        assert stop.wait(30.0) is True
    finally:
        stop.close()


def test_set_after_close_is_harmless() -> None:
    stop = StopSignal()
    stop.close()
    stop.set()
    assert stop.is_set()
