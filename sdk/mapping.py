"""Map: one function over many inputs as many jobs, submitted lazily, read back as they end.

`f.map(inputs)` (a udf), `q.map(fn, inputs)` and the `starmap` twins are this module's `run_map`.
It is SDK-side only: the plane sees ordinary submits (`submit_many` in windows of `WINDOW` jobs)
and ordinary reads. What keeps it safe with a generator of millions of inputs:

- bounded work in flight: at most `MAX_IN_FLIGHT` jobs (`MAX_INPUTS_IN_FLIGHT` inputs) are
  submitted and not yet yielded, so the producer holds that many ids and results, never the
  whole input or output;
- results in input order (`ordered=True`: a wait on the oldest job while the rest run), or as
  they end (`ordered=False`: a wait on the oldest, and a look at the others when it is slow);
- the first failure raises `MapItemError` naming its input's index, unless `return_exceptions`
  puts the error in the item's place;
- a consumer that stops early (breaks, closes the generator) or is interrupted (Ctrl-C) cancels
  every job still queued: the `finally` of the generator runs on close and on KeyboardInterrupt.

`chunk_size=n` packs n inputs into one job that returns their results: tiny items cost a job per
chunk instead of a job each. An item that raises inside a chunk is listed with its error beside
the values (a plain value of the chunk's result), so one bad item neither fails nor re-runs its
chunk, and no value an item returns can be mistaken for an error.

Every job of a map carries its id (`SubmitRequest.map_id`, migration 27): `lakeshore jobs ls
--map ID` lists them.
"""

from __future__ import annotations

import itertools
import traceback
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from .envelope import Envelope
from .errors import DispatchError, InvalidArgument
from .queue_jobs import Shipped, result_of
from .types import Invocation, SubmitRequest

if TYPE_CHECKING:
    from .plane.base import Plane


class MapQueue(Protocol):
    """What a map needs of its queue (a `SyncQueue`): stated here, so that the queue imports
    the map, and not the other way round."""

    name: str
    allow_pickle: bool

    @property
    def dispatch(self) -> Plane: ...

    def _request(self, *args: Any, **kwargs: Any) -> SubmitRequest:
        """The queue's own encoder: a submit's request from its envelope and options."""
        ...


#: Jobs per submit: one transaction (one request over HTTP) each.
WINDOW = 256
#: Jobs submitted and not yet yielded, at most (the `max_in_flight` default)...
MAX_IN_FLIGHT = 1024
#: ... and inputs they cover, at most: what bounds the producer's memory with big chunks...
MAX_INPUTS_IN_FLIGHT = 65536
#: ... but never fewer jobs than this, so huge chunks still keep several workers busy.
MIN_JOBS_IN_FLIGHT = 8
#: How long one read waits on the oldest job before it looks again (and, unordered, at the rest).
HEAD_WAIT_S = 1.0
#: Unordered: how long the oldest job is waited on before the others are looked at.
UNORDERED_WAIT_S = 0.2
#: A chunk's result: its items' values, and the [position, error text] of those that raised.
CHUNK_VALUES = "values"
CHUNK_ERRORS = "errors"
#: How a daemon of an earlier release marked an item that raised, in place of its value.
ERROR_MARK = "__lakeshore_map_error__"


class MapItemError(DispatchError):
    """An input of a map whose job failed (or, in a chunk, whose call raised)."""

    code = "map_item_failed"

    def __init__(self, index: int, invocation: str, error: str) -> None:
        super().__init__(f"map item {index} (invocation {invocation}) failed: {error}")
        #: The input's position in the map's inputs, from 0.
        self.index = index
        self.invocation = invocation
        self.error = error


@dataclass
class _Job:
    """One submitted job of a map: the inputs it covers and, once read, its outcome."""

    id: str
    start: int
    #: Inputs it covers: 1, or the chunk's length.
    count: int
    chunked: bool
    done: Invocation | None = None


def run_chunk(fn: Callable[..., Any], items: list[Any], star: bool) -> dict[str, Any]:
    """A chunk's body, on the worker: each item's result in `values`, and in `errors` the
    position and error text of each item that raised (its value None).

    The errors travel beside the values, never in their place: a value is whatever the user's
    function returned, so no value, however shaped, can be misread as an error.
    """
    values: list[Any] = []
    errors: list[list[Any]] = []
    for i, item in enumerate(items):
        try:
            values.append(fn(*item) if star else fn(item))
        except Exception as exc:  # the item's failure is its own, not its chunk's
            text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            values.append(None)
            errors.append([i, text])
    return {CHUNK_VALUES: values, CHUNK_ERRORS: errors}


def chunk_outcomes(value: Any, start: int, inv_id: str) -> list[Any]:
    """A chunk job's result as its items' outcomes, in input order (a failed item's is a
    `MapItemError`). A list is what a daemon of an earlier release returned: its items that
    raised are one-key dicts under ERROR_MARK."""
    if isinstance(value, list):
        return [
            MapItemError(start + i, inv_id, str(item[ERROR_MARK]))
            if isinstance(item, dict) and set(item) == {ERROR_MARK}
            else item
            for i, item in enumerate(value)
        ]
    out: list[Any] = list(value[CHUNK_VALUES])
    for i, text in value[CHUNK_ERRORS]:
        out[i] = MapItemError(start + i, inv_id, str(text))
    return out


def check_map_options(chunk_size: int | None, window: int, max_in_flight: int) -> None:
    if chunk_size is not None and (
        isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1
    ):
        raise InvalidArgument(
            f"chunk_size must be a positive integer (inputs per job), or None for one input "
            f"per job; got {chunk_size!r}"
        )
    if not 1 <= window <= 1000 or max_in_flight < 1:
        raise InvalidArgument(
            f"window must be 1..1000 jobs per submit and max_in_flight at least 1 job; "
            f"got window={window}, max_in_flight={max_in_flight}"
        )


class _Map:
    """The state of one running map; `results()` is the generator the caller iterates."""

    def __init__(
        self,
        queue: MapQueue,
        fn: Callable[..., Any],
        inputs: Iterable[Any],
        *,
        star: bool,
        chunk_size: int | None,
        submit: dict[str, Any],
        window: int,
        max_in_flight: int,
    ) -> None:
        from .ids import new_id

        self.queue = queue
        self.fn = fn
        self.star = star
        self.chunk_size = chunk_size
        self.submit_options = submit
        self.window = window
        self.max_in_flight = max_in_flight
        self.id = new_id()
        self.name = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', '?')}"
        self._inputs = iter(inputs)
        self._next_index = 0
        self._exhausted = False
        self.pending: deque[_Job] = deque()
        #: Unordered: jobs a look found ended, not yet yielded (each is out of `pending`).
        self._ready: deque[_Job] = deque()
        self._in_flight = 0  # inputs of the pending jobs
        #: What every job brings, made for the first (one function: one bundle), then reused.
        self._shipped: Shipped | None = None

    # -- submitting ---------------------------------------------------------------------------

    def _envelope(self, item: Any) -> Envelope:
        if self.chunk_size is not None:
            return Envelope.for_udf(run_chunk, (self.fn, item, self.star), {}, self.name)
        args = tuple(item) if self.star else (item,)
        return Envelope.for_udf(self.fn, args, {}, self.name)

    def _take(self, jobs: int) -> list[tuple[int, int, Any]]:
        """Up to `jobs` job bodies from the inputs: (first index, inputs, item or chunk)."""
        out: list[tuple[int, int, Any]] = []
        size = self.chunk_size or 1
        while len(out) < jobs and not self._exhausted:
            items = list(itertools.islice(self._inputs, size))
            if not items:
                self._exhausted = True
                break
            if self.star and not all(isinstance(i, (tuple, list)) for i in items):
                bad = next(i for i in items if not isinstance(i, (tuple, list)))
                raise InvalidArgument(f"starmap takes tuples of arguments; got {bad!r}")
            body = items if self.chunk_size is not None else items[0]
            out.append((self._next_index, len(items), body))
            self._next_index += len(items)
        return out

    def _room(self) -> int:
        """How many more jobs may be submitted now (see the limits above)."""
        jobs = len(self.pending) + len(self._ready)
        by_inputs = (MAX_INPUTS_IN_FLIGHT - self._in_flight) // (self.chunk_size or 1)
        return min(self.max_in_flight - jobs, max(MIN_JOBS_IN_FLIGHT - jobs, by_inputs))

    def fill(self) -> None:
        """Submit windows of jobs while the inputs last and room is left in flight."""
        while not self._exhausted and (room := self._room()) > 0:
            bodies = self._take(min(self.window, room))
            if not bodies:
                return
            reqs = [self._request(body) for _, _, body in bodies]
            ids = self.queue.dispatch.submit(self.queue.name, reqs)
            for (start, count, _), inv_id in zip(bodies, ids, strict=True):
                self.pending.append(_Job(inv_id, start, count, self.chunk_size is not None))
                self._in_flight += count

    def _request(self, body: Any) -> SubmitRequest:
        options = self.submit_options
        if self._shipped is not None:
            options = {**options, "runtime": self._shipped}
        req: SubmitRequest = self.queue._request(  # the queue's own encoder
            envelope=self._envelope(body), **options
        )
        self._shipped = Shipped(req.runtime)
        return replace(req, map_id=self.id)

    # -- reading ------------------------------------------------------------------------------

    def _read(self, job: _Job, wait_s: float) -> bool:
        if job.done is None:
            inv = self.queue.dispatch.invocation(job.id, wait_s=wait_s)
            if inv.terminal:
                job.done = inv
        return job.done is not None

    def next_done(self, ordered: bool) -> _Job:
        """The next job to yield: the oldest once it ends, or (unordered) whichever ends first.

        Unordered, a wait on the oldest that runs out is followed by one look at each other
        job in flight: at most one read per job per `UNORDERED_WAIT_S` while the oldest is slow.
        """
        if self._ready:
            return self._ready.popleft()
        head = self.pending[0]
        while True:
            if self._read(head, HEAD_WAIT_S if ordered else UNORDERED_WAIT_S):
                self.pending.popleft()
                return head
            if not ordered:
                ended = [j for j in itertools.islice(self.pending, 1, None) if self._read(j, 0.0)]
                if ended:
                    self.pending = deque(j for j in self.pending if j.done is None)
                    self._ready.extend(ended[1:])
                    return ended[0]

    def outcomes(self, job: _Job) -> list[Any]:
        """The values `job` stands for, in input order; a failed input's is a `MapItemError`."""
        from .objects.plane import using

        self._in_flight -= job.count
        assert job.done is not None
        inv = job.done
        if inv.state != "succeeded":
            said = inv.error or inv.state
            text = said if inv.state == "failed" else f"{inv.state}: {said}"
            return [MapItemError(job.start, inv.id, text)] * job.count
        with using(self.queue.dispatch):
            value = result_of(inv, allow_pickle=self.queue.allow_pickle)
        if not job.chunked:
            return [value]
        return chunk_outcomes(value, job.start, inv.id)

    def has_ready(self) -> bool:
        return bool(self._ready)

    def cancel_rest(self) -> int:
        """Cancel every job of this map not yet read as ended; returns how many were."""
        cancelled = 0
        for job in self.pending:
            if job.done is None:
                try:
                    cancelled += bool(self.queue.dispatch.cancel(job.id))
                except DispatchError:
                    continue  # gone meanwhile (retention): nothing left to cancel
        self.pending.clear()
        return cancelled


class MapResults(Iterator[Any]):
    """A running map's results: iterate it; `id` names its jobs (`jobs ls --map ID`).

    Closing it (or leaving a `with` block, or dropping it) cancels what is still queued.
    """

    def __init__(self, state: _Map, ordered: bool, return_exceptions: bool) -> None:
        self.id = state.id
        self._results = _results(state, ordered, return_exceptions)

    def __next__(self) -> Any:
        return next(self._results)

    def close(self) -> None:
        self._results.close()

    def __enter__(self) -> MapResults:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_map(
    queue: MapQueue,
    fn: Callable[..., Any],
    inputs: Iterable[Any],
    *,
    star: bool = False,
    ordered: bool = True,
    return_exceptions: bool = False,
    chunk_size: int | None = None,
    window: int = WINDOW,
    max_in_flight: int = MAX_IN_FLIGHT,
    **submit: Any,
) -> MapResults:
    """The map's results (see the module's docstring). Nothing is submitted until the first
    `next()`; `submit` holds `priority`, `max_attempts`, `timeout_s`."""
    check_map_options(chunk_size, window, max_in_flight)
    state = _Map(
        queue,
        fn,
        inputs,
        star=star,
        chunk_size=chunk_size,
        submit=submit,
        window=window,
        max_in_flight=max_in_flight,
    )
    return MapResults(state, ordered, return_exceptions)


def _results(state: _Map, ordered: bool, return_exceptions: bool) -> Generator[Any, None, None]:
    try:
        state.fill()
        while state.pending or state.has_ready():
            job = state.next_done(ordered)
            values = state.outcomes(job)
            state.fill()  # before yielding: the next jobs run while the consumer works
            for value in values:
                if isinstance(value, MapItemError) and not return_exceptions:
                    raise value
                yield value
    finally:
        # Closed early, interrupted, or failed: what is still queued does not run.
        state.cancel_rest()
