"""A worker on an embedded plane hears of a kill at once (issue 48), as a daemon with a channel
does: a thread waits on the store's waker for the worker's `kill_key`, which a kill request
notifies from any process on the store (the waker's relay carries its keys: a datagram on one
box, NOTIFY on Postgres), and calls `push("renew")`: the worker renews now and so learns
which job. A wake-up for anything else does not count (`Waker.moved`), and a push is only a
hint: without one, the next renewal (at most a second later) learns the same."""

from __future__ import annotations

import threading
from collections.abc import Callable

from .wakeup import Waker, kill_key

#: The longest one wait lasts before looking again (only bounds a lost wake-up's cost).
WAIT_S = 30.0


class KillWatch:
    def __init__(self, waker: Waker, namespace: str, worker: str, push: Callable[[str], None]):
        self._waker = waker
        self._key = kill_key(namespace, worker)
        self._push = push
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._watch, name="lakeshore-kill-watch", daemon=True
        )
        self._thread.start()

    def _watch(self) -> None:
        generation = self._waker.generation
        while not self._stop.is_set():
            self._waker.wait(generation, WAIT_S, work=[self._key])
            now = self._waker.generation  # read first: a kill after it is seen next round
            if self._waker.moved(generation, self._key) and not self._stop.is_set():
                self._push("renew")
            generation = now

    def stop(self) -> None:
        self._stop.set()
        self._waker.notify(local_only=True, work=[self._key], reads=False)
        self._thread.join(timeout=5)
