"""Long-polls: hold a request until the store has what it asks for, without holding a thread.

Each check is a blocking store read, so it runs in a worker thread; between checks the request
awaits the store's `Waker` (bumped by every commit, in this process or, for SQLite, in the
others), so a thousand idle claims cost a thousand futures, not a thousand threads. A generation
read before the check closes the race with a commit landing between the check and the wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from starlette.requests import Request

from dreamlake.lakeshore.errors import QueueFullError
from dreamlake.lakeshore.plane.store import SqlStore
from dreamlake.lakeshore.plane.waiting import Deadline, room_wait
from dreamlake.lakeshore.plane.wakeup import work_key
from dreamlake.lakeshore.types import DEFAULT_QUEUE, Claim, ClaimArgs, SubmitRequest

from .blocking import run_blocking
from .client_timeouts import client_gone
from .handoff import Seats, hand

#: The longest a single request is held; clients asking for more simply ask again.
MAX_WAIT_S = 60.0

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Handed(Protocol[T_co]):
    """A wait's seat that a writer may hand the awaited value to (`handoff.Reader`)."""

    @property
    def ended(self) -> T_co | None: ...

    def armed(self) -> asyncio.Future[None]: ...


async def wait_until(
    store: SqlStore,
    fetch: Callable[[], T],
    ready: Callable[[T], bool],
    wait_s: float,
    request: Request | None = None,
    *,
    work: Sequence[str] | None = None,
    read: bool = False,
    since: int | None = None,
    reader: Handed[T] | None = None,
) -> T:
    """`fetch()` until `ready`, up to `wait_s` (capped); the last value either way.

    With `request`, a caller that hung up ends the wait early: nothing would read the answer.
    With `work` (a claim's `work_key`s, or `READERS` for a result or a journal), only a commit
    that may bring something there re-runs `fetch` before the safety poll does: idle claims
    stay asleep through other queues' traffic, and result waits through claims and submits.
    `read=True` says `fetch` is a read transaction, which runs on the loop itself when the store
    allows it (`reads_inline`: SQLite's reader never waits for a writer): no thread-pool hop.
    `since`, a generation read before the change whose outcome is awaited (the submit of a
    submit-and-wait), skips the first fetch, which could only find the change not done yet.
    `reader`, a submit-and-wait's `Reader` (handoff.py): what an ack handed it ends the wait
    without a fetch.
    """
    deadline = Deadline(wait_s, MAX_WAIT_S)
    waker = store.waker
    inline = read and store.connector.reads_inline
    if since is not None:
        await waker.wait_async(
            since, deadline.nap(), work=work, wake=reader.armed() if reader else None
        )
    while True:
        if reader is not None and reader.ended is not None:
            return reader.ended
        generation = waker.generation
        if inline:
            value = fetch()
        else:
            value = await run_blocking(fetch)
        if ready(value) or deadline.passed:
            return value
        if since is not None and request is not None and await hung_up(request):
            return value
        since = generation
        await waker.wait_async(
            generation, deadline.nap(), work=work, wake=reader.armed() if reader else None
        )


async def claim_until(
    store: SqlStore,
    seats: Seats,
    ns: str,
    args: ClaimArgs,
    wait_s: float,
    request: Request,
    *,
    since: int | None = None,
) -> list[Claim]:
    """A claim long-poll: `claim_many` until it gets something, up to `wait_s` (capped).

    As `wait_until` with the queues' work keys, and while it waits it holds a seat (`Seats`):
    a submit to one of its queues on this server may claim for it in the submit's own
    transaction and hand it the claims, which then need no transaction of their own.
    `since` as for `wait_until`: a generation before a claim that already found nothing.
    """
    deadline = Deadline(wait_s, MAX_WAIT_S)
    waker = store.waker
    work = [work_key(ns, q) for q in args.queues or [DEFAULT_QUEUE]]

    def fetch() -> list[Claim]:
        return store.claim_many(ns, args)

    fetched = False
    while True:
        if since is None:
            since = waker.generation
            got = await run_write(store, fetch, durable=False)
            if got or deadline.passed:
                return got
            if fetched and await hung_up(request):
                return got
            fetched = True
        with seats.held(ns, args, work) as seat:
            await waker.wait_async(since, deadline.nap(), work=work, wake=seat.wake)
        since = None
        if seat.handed is not None:  # a submit took the seat: what did its write hand over?
            got = await seat.handed
            if got:
                return got
        if seat.dismissed:  # its worker is draining (`Seats.dismiss`)
            return []


async def run_write(store: SqlStore, write: Callable[[], T], *, durable: bool = True) -> T:
    """`write()` on the event loop when the store's writer is free this instant (and, for a
    `durable` write, its disk quick: `run_if_free`), else on the thread pool.

    On a quiet server the loop has nothing better to do during the write, and the hop to a
    thread and back costs more CPU than a small commit; on a busy one the writer is taken as
    often as not and the write queues in the pool as before.
    """
    ran, value = store.connector.run_if_free(write, durable=durable)
    if ran:
        return value  # type: ignore[return-value]  # ran: write's own value
    return await run_blocking(write)


async def synced(store: SqlStore, mark: int) -> None:
    """Return once every write up to `mark` is on disk (`Connector.sync`): at once when a
    durable commit since has carried it there (the ack that ended a submit-and-wait's job, on
    this server), else after one fsync of the log, on the pool."""
    if not store.connector.synced(mark):
        await run_blocking(store.connector.sync, mark)


async def hung_up(request: Request) -> bool:
    """Whether the client has gone: Starlette's `is_disconnected`, at a fraction of its cost.

    Starlette polls `receive()` inside an anyio cancel scope, whose cancellation formats the
    task's repr on every call; on a busy server that was a tenth of the event loop's time. The
    same poll with a plain task: give `receive()` one turn of the loop, and a client that hung
    up has its `http.disconnect` waiting by then. Under this server's own protocol the
    connection says so without the turn (`client_gone`).
    """
    gone = client_gone(request.scope)
    if gone is not None:
        return gone
    receiving = asyncio.ensure_future(request.receive())
    await asyncio.sleep(0)
    if not receiving.done():
        receiving.cancel()
        return False
    return bool(receiving.result().get("type") == "http.disconnect")


async def admit(
    store: SqlStore, submit: Callable[[], T], wait_s: float, *, durable: bool = True
) -> T:
    """Run `submit`; while a blocking queue is full, wait for room up to `wait_s` (capped).

    Room appears when a claim commits (a wake-up) or, under a rate limit, as time passes (the
    refusal says when), so the wait is on the waker bounded by the refusal's retry hint.
    `durable`: whether `submit` waits for its fsync (`run_write`).
    """
    deadline = Deadline(wait_s, MAX_WAIT_S)
    waker = store.waker
    while True:
        generation = waker.generation
        try:
            return await run_write(store, submit, durable=durable)
        except QueueFullError as full:
            await waker.wait_async(generation, room_wait(full, deadline))


async def admit_handing(
    store: SqlStore,
    seats: Seats,
    ns: str,
    queue: str,
    requests: Sequence[SubmitRequest],
    wait_s: float,
    *,
    sync_later: bool = False,
) -> list[str]:
    """`admit` a submit that first hands its jobs to the claims held on its queue (`Seats`),
    in its own transaction. A full queue, or no claim held, is a plain `admit`.

    `sync_later`: the submit owes its fsync (`Connector.transaction`); the caller sends no id
    before `synced`. The claims are handed over at once all the same: the worker starts while
    the disk has yet to hear of the job, and its ack's fsync is the one the submit owed.
    """

    def submit() -> list[str]:
        return store.submit(ns, queue, requests, sync_later=sync_later)

    taken = seats.take(work_key(ns, queue), len(requests))
    if not taken:
        return await admit(store, submit, wait_s, durable=not sync_later)
    # Each claims from this queue only, by its own kind and steal rule (`submit_handing`).
    claimers = [seat.args for seat in taken]
    try:
        ids, claims = await run_write(
            store,
            lambda: store.submit_handing(ns, queue, requests, claimers, sync_later=sync_later),
            durable=not sync_later,
        )
    except QueueFullError:
        hand(taken, None)
        return await admit(store, submit, wait_s, durable=not sync_later)
    except BaseException:
        hand(taken, None)
        raise
    orphaned = hand(taken, claims)
    if orphaned:  # their claimers went away while the write ran: back to the queue now
        await run_blocking(lambda: [store.release(c.id, c.lease) for c in orphaned])
    elif any(claims):
        # Let the claimers answer before this request goes on: their workers start the jobs
        # while this one sets up its own wait (a submit-and-wait) or answers.
        await asyncio.sleep(0)
    return ids
