"""Where a payload's objects live: the host a job should run on to read them without a fetch.

A submit sends the plane a hint (`SubmitRequest.host`) and the plane holds the job for a worker
on that host for the queue's `admission.locality_wait_s` (plane/locality.py). The plane never
decodes a payload, so the producer works the hint out here, from what it already holds: the
Refs anywhere in the value it submits (a `dls.put` handle in a dict, a list, a call's
arguments) and the Refs spill made while encoding it (big array arguments, or the whole payload
when it is over the inline limit). Nothing is read or decoded: a Ref names its host and size.

The hint is the host holding the most of those bytes, and only when they are more than the
inline limit: smaller objects would have ridden inside the message, and fetching them costs
less than any wait for their host.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from itertools import islice
from typing import Any, Final

from .envelope import Envelope, Thunk
from .ref import Ref

__all__ = ["MAX_VISITS", "host_of", "refs_in"]

#: Most values looked at when searching one payload for Refs: a list of a million numbers costs
#: a bounded look, not a walk of it all (a Ref past the budget is simply not counted).
MAX_VISITS: Final = 10_000


def refs_in(value: Any, *, budget: int = MAX_VISITS) -> list[Ref]:
    """The Refs in `value`, looked for in containers, call arguments and raw envelopes."""
    found: list[Ref] = []
    todo: deque[Any] = deque([value])
    while todo and budget > 0:
        item = todo.popleft()
        budget -= 1
        inner: Iterable[Any] = ()
        if isinstance(item, Ref):
            found.append(item)
        elif isinstance(item, (Thunk, Envelope)):
            inner = (*item.args, *item.kwargs.values())
            if isinstance(item, Envelope) and item.value is not None:
                inner = (*inner, item.value)
        elif isinstance(item, Mapping):
            inner = item.values()
        elif isinstance(item, (list, tuple, set, frozenset)):
            inner = item
        todo.extend(islice(inner, budget))  # never more than can still be looked at
    return found


def host_of(refs: Iterable[Ref], *, least: int = 0) -> str | None:
    """The host whose tier holds the most bytes of `refs` (each object counted once), when
    that is more than `least` bytes; else None. Ties go to the host met first."""
    seen: set[str] = set()
    held: dict[str, int] = {}
    for ref in refs:
        if ref.host is None or ref.id in seen:
            continue
        seen.add(ref.id)
        held[ref.host] = held.get(ref.host, 0) + ref.size
    if not held:
        return None
    host = max(held, key=held.__getitem__)  # the first of equals: dicts keep their order
    return host if held[host] > least else None
