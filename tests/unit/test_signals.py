"""The stop signals as a restorable context manager: first drains, second stops, then restored."""

from __future__ import annotations

import os
import signal
import threading

from dreamlake.lakeshore.signals import stop_signals


def test_first_signal_drains_second_stops_and_handlers_are_restored() -> None:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    calls: list[tuple[str, int]] = []
    with stop_signals(lambda s: calls.append(("drain", s)), lambda s: calls.append(("stop", s))):
        assert signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM]
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
    assert calls == [
        ("drain", signal.SIGTERM),
        ("stop", signal.SIGINT),
        ("stop", signal.SIGTERM),
    ]
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_opting_out_leaves_handlers_alone() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with stop_signals(lambda s: None, lambda s: None, install=False):
        assert signal.getsignal(signal.SIGTERM) is before


def test_off_the_main_thread_nothing_is_installed() -> None:
    before = signal.getsignal(signal.SIGTERM)
    seen: list[object] = []

    def body() -> None:
        with stop_signals(lambda s: None, lambda s: None):
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [before]


def test_a_signal_while_the_main_thread_holds_a_lock_the_stop_needs_does_not_deadlock() -> None:
    # Given a stop that takes a (non-reentrant) lock the main thread holds when the signal comes
    held = threading.Lock()
    got: list[bool] = []

    def on_first(signum: int) -> None:
        took = held.acquire(timeout=5)  # in the handler itself, this would wait on its own thread
        got.append(took)
        if took:
            held.release()

    with stop_signals(on_first, lambda s: None), held:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # the handler runs between two of these bytecodes
            pass

    assert got == [True]
