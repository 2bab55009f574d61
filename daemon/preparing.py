"""While a job's runtime is made ready, its row says so (issue 46): `lakeshore jobs show` and
`exec --wait` read it there.

A bundle already on the box and a built environment take milliseconds, and saying so would cost
every such job a write to the plane: the row is written only once making it ready has taken
longer than `SAY_AFTER_S`, then again as the words change (at most once a second), and put back
as it was once the job's runtime is ready. The words go in the attempt's placement, beside its
worker and GPUs, under `preparing`: a field a reader of placements may show and otherwise
ignores, written under the attempt's lease like the rest of it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Final

from dreamlake.lakeshore.errors import DispatchError
from dreamlake.lakeshore.types import Claim

__all__ = ["SAY_AFTER_S", "Preparing"]

#: How long making a runtime ready may take before the job's row says so.
SAY_AFTER_S: Final = 0.5
#: Most writes a second while it does.
_EVERY_S: Final = 1.0


class Preparing:
    """`with Preparing(plane, claim, spec) as saying: ... saying.progress(words)`"""

    def __init__(self, plane: Any, claim: Claim, spec: Mapping[str, Any]) -> None:
        self._plane = plane
        self._claim = claim
        self._headline = _first_words(spec)
        self._words = self._headline
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._said_at: float | None = None
        self._before: dict[str, Any] | None = None
        self._timer = threading.Timer(SAY_AFTER_S, self._say)
        self._timer.daemon = True

    def __enter__(self) -> Preparing:
        self._timer.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._timer.cancel()
        with self._lock:
            self._done.set()
            said, before = self._said_at is not None, self._before
        if said:
            self._write(before or {})

    def progress(self, words: str) -> None:
        """The latest step (a uv command, a line of its output), said after the headline if
        the row says anything yet."""
        with self._lock:
            self._words = f"{self._headline}: {words}"[:300]
            due = self._said_at is not None and time.monotonic() - self._said_at >= _EVERY_S
        if due:
            self._say()

    def _say(self) -> None:
        with self._lock:
            if self._done.is_set():
                return
            first = self._said_at is None
            self._said_at = time.monotonic()
            words = self._words
        if first:
            try:
                self._before = dict(self._plane.invocation(self._claim.id).placement or {})
            except DispatchError:
                self._before = {}
        self._write({**(self._before or {}), "preparing": words})

    def _write(self, placement: dict[str, Any]) -> None:
        # words for a reader: a lost lease or an outage is the run's to find, not this one's
        with contextlib.suppress(DispatchError):
            self._plane.place(self._claim.id, self._claim.lease, placement)


def _first_words(spec: Mapping[str, Any]) -> str:
    parts = []
    if spec.get("bundle"):
        size = int(spec.get("bytes") or 0)
        parts.append(f"fetching the job's code ({spec.get('files', 0)} files, {size:,} bytes)")
    if spec.get("requirements"):
        parts.append(f"building its environment ({len(spec['requirements'])} requirements)")
    return ", then ".join(parts) or "making the job's runtime ready"
