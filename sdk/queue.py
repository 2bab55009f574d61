"""`SyncQueue` holds every verb; `Queue` is its async sibling and offloads to a thread.

A queue object is only a name bound to a plane and a claim order: it holds no state of the
queue itself, so any number of them, in any process, see the same rows.
"""

from __future__ import annotations

import asyncio
import os
import socket
import traceback
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from . import codec
from .envelope import Envelope, Thunk
from .errors import DispatchError, InvalidArgument
from .plane.base import Plane
from .plane.default import default_plane
from .topic import Topic, iter_frames
from .types import STATES, Claim, Invocation, SubmitRequest, check_name, normalize_kind

DEFAULT_LEASE_S = 60.0


@dataclass
class Job:
    """A claimed invocation; `lease` fences this attempt's ack, nack and posts."""

    id: str
    payload: Any
    attempt: int
    queue: str
    lease: str = field(default="", repr=False)
    timeout_s: float | None = field(default=None, repr=False)


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def result_of(inv: Invocation) -> Any:
    """Decode a terminal invocation's result, or raise what ended it."""
    if inv.state == "succeeded":
        return codec.decode(inv.result) if inv.result is not None else None
    raise DispatchError(
        f"invocation {inv.id} {inv.state}" + (f": {inv.error}" if inv.error else "")
    )


def encode_submit(
    payload: Any,
    envelope: Envelope | None,
    key: str | None,
    priority: float,
    max_attempts: int,
    timeout_s: float | None,
) -> SubmitRequest:
    if envelope is not None and payload is not None:
        raise InvalidArgument("pass a payload or an envelope, not both")
    body: Any = envelope if envelope is not None else payload
    if isinstance(body, Thunk):
        body = Envelope.for_thunk(body)
    return SubmitRequest(
        payload=codec.encode(body),
        key=key,
        priority=priority,
        max_attempts=max_attempts,
        timeout_s=timeout_s if timeout_s is not None else getattr(body, "timeout_s", None),
    )


class SyncQueue:
    """A named channel on a plane, with blocking verbs."""

    def __init__(
        self,
        name: str,
        *,
        dispatch: Plane | None = None,
        kind: str = "fifo",
        temperature: float = 1.0,
    ) -> None:
        self.name = check_name(name)
        self.kind = normalize_kind(kind)
        if not isinstance(temperature, (int, float)) or temperature < 0:
            raise InvalidArgument(f"temperature must be a number >= 0, got {temperature!r}")
        self.temperature = float(temperature)
        self._dispatch = dispatch
        self._held: dict[str, str] = {}  # invocation id -> lease, for post()

    @property
    def dispatch(self) -> Plane:
        """The plane, resolved on first use so that constructing a queue costs nothing."""
        if self._dispatch is None:
            self._dispatch = default_plane()
        return self._dispatch

    def __repr__(self) -> str:
        return f"SyncQueue({self.name!r}, kind={self.kind!r})"

    # -- producer verbs -----------------------------------------------------------------------

    def submit(
        self,
        payload: Any = None,
        *,
        envelope: Envelope | None = None,
        key: str | None = None,
        priority: float = 0.0,
        max_attempts: int = 3,
        timeout_s: float | None = None,
    ) -> str:
        """Enqueue; returns the durable invocation id. The same `key` returns the same id."""
        req = encode_submit(payload, envelope, key, priority, max_attempts, timeout_s)
        return self.dispatch.submit(self.name, [req])[0]

    def submit_many(
        self, payloads: Sequence[Any], *, priority: float = 0.0, max_attempts: int = 3
    ) -> list[str]:
        """Enqueue many in one transaction (one round trip over HTTP)."""
        reqs = [encode_submit(p, None, None, priority, max_attempts, None) for p in payloads]
        return self.dispatch.submit(self.name, reqs)

    def result(self, inv_id: str, *, timeout: float = 30.0) -> Any:
        inv = self.dispatch.invocation(inv_id, wait_s=timeout)
        if not inv.terminal:
            raise TimeoutError(f"invocation {inv_id} still {inv.state} after {timeout}s")
        return result_of(inv)

    def call(self, payload: Any = None, *, timeout: float = 30.0, **kw: Any) -> Any:
        return self.result(self.submit(payload, **kw), timeout=timeout)

    def stream(self, inv_id: str, *, since: int = -1, timeout: float = 30.0) -> Iterator[Any]:
        """Decoded VALUE frames after `since`, live; END stops, ERROR raises."""
        return iter_frames(self.dispatch, inv_id, since=since, timeout=timeout)

    def status(self, inv_id: str) -> Invocation:
        return self.dispatch.invocation(inv_id)

    def cancel(self, inv_id: str, *, kill: bool = False) -> bool:
        return self.dispatch.cancel(inv_id, kill=kill)

    def count(self, state: str = "queued") -> int:
        if state not in STATES:
            raise DispatchError(f"unknown state '{state}'; use {'|'.join(STATES)}")
        return self.dispatch.count(self.name, state)

    def __len__(self) -> int:
        return self.count()

    # -- worker verbs -------------------------------------------------------------------------

    def claim(self, *, wait: float = 0.0, lease_s: float = DEFAULT_LEASE_S) -> Job | None:
        """Claim one job in this queue's kind order, or None when the queue is empty."""
        claim = self.dispatch.claim(
            [self.name],
            worker=worker_identity(),
            lease_s=lease_s,
            kind=self.kind,
            temperature=self.temperature,
            wait_s=wait,
        )
        return self._job(claim) if claim else None

    def _job(self, claim: Claim) -> Job:
        self._held[claim.id] = claim.lease
        return Job(
            id=claim.id,
            payload=codec.decode(claim.payload),
            attempt=claim.attempt,
            queue=claim.queue,
            lease=claim.lease,
            timeout_s=claim.timeout_s,
        )

    def ack(self, job: Job, result: Any = None) -> None:
        self.dispatch.ack(job.id, job.lease, codec.encode(result))
        self._held.pop(job.id, None)

    def nack(self, job: Job, *, error: str, retry: bool = True) -> None:
        self.dispatch.nack(job.id, job.lease, error=str(error), retry=retry)
        self._held.pop(job.id, None)

    @contextmanager
    def working(self, *, wait: float = 0.0) -> Iterator[Job | None]:
        """Claim one job; ack on success, nack (retry) and re-raise on an exception."""
        job = self.claim(wait=wait)
        if job is None:
            yield None
            return
        try:
            yield job
        except BaseException as exc:
            self.nack(job, error="".join(traceback.format_exception(exc)), retry=True)
            raise
        self.ack(job)

    def post(self, inv_id: str, value: Any = None, *, final: bool = False) -> int:
        """Append a VALUE frame (or END with final=True) to a job this queue claimed."""
        lease = self._held.get(inv_id)
        if lease is None:
            raise DispatchError(
                f"post refused: invocation '{inv_id}' was not claimed through this queue"
            )
        return self.dispatch.post(
            inv_id, "END" if final else "VALUE", codec.encode(value), lease=lease
        )

    def topic(self, name: str | None = None) -> Topic:
        return Topic(self.dispatch, self.name, name)


class Queue:
    """The async surface: every blocking call runs in a worker thread."""

    def __init__(self, name: str, **kw: Any) -> None:
        self.sync = SyncQueue(name, **kw)

    @property
    def name(self) -> str:
        return self.sync.name

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, kind={self.sync.kind!r})"

    async def submit(self, payload: Any = None, **kw: Any) -> str:
        return await asyncio.to_thread(self.sync.submit, payload, **kw)

    async def submit_many(self, payloads: Sequence[Any], **kw: Any) -> list[str]:
        return await asyncio.to_thread(self.sync.submit_many, payloads, **kw)

    async def result(self, inv_id: str, *, timeout: float = 30.0) -> Any:
        return await asyncio.to_thread(self.sync.result, inv_id, timeout=timeout)

    async def call(self, payload: Any = None, *, timeout: float = 30.0, **kw: Any) -> Any:
        inv = await self.submit(payload, **kw)
        return await self.result(inv, timeout=timeout)

    async def stream(
        self, inv_id: str, *, since: int = -1, timeout: float = 30.0
    ) -> AsyncIterator[Any]:
        frames = self.sync.stream(inv_id, since=since, timeout=timeout)
        done = object()
        while True:
            value = await asyncio.to_thread(next, frames, done)
            if value is done:
                return
            yield value

    async def cancel(self, inv_id: str, *, kill: bool = False) -> bool:
        return await asyncio.to_thread(self.sync.cancel, inv_id, kill=kill)

    async def count(self, state: str = "queued") -> int:
        return await asyncio.to_thread(self.sync.count, state)

    async def claim(self, *, wait: float = 0.0, lease_s: float = DEFAULT_LEASE_S) -> Job | None:
        return await asyncio.to_thread(self.sync.claim, wait=wait, lease_s=lease_s)

    async def ack(self, job: Job, result: Any = None) -> None:
        await asyncio.to_thread(self.sync.ack, job, result)

    async def nack(self, job: Job, *, error: str, retry: bool = True) -> None:
        await asyncio.to_thread(self.sync.nack, job, error=error, retry=retry)

    def topic(self, name: str | None = None) -> Topic:
        return self.sync.topic(name)
