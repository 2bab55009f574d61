"""The worker's routes: claim, settle, renew leases, checkpoint, and post and read frames.

Kept apart from the producer's (routes_invocations.py) because every call here acts on a claimed
attempt: it carries the attempt's lease, which the store checks, so a worker whose lease ran out
(or a leaked id from another namespace) can neither settle nor post. A claim's `wait` is a
long-poll held on the store's wake-up, capped at `longpoll.MAX_WAIT_S`. The frames of an
invocation or a topic sit here too: a worker posts them, a producer reads them with `?wait=`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from dreamlake.lakeshore.errors import DispatchError, InvalidArgument
from dreamlake.lakeshore.plane import routes
from dreamlake.lakeshore.plane.auth import JOB, READ, SUBMIT_DATA, WORK
from dreamlake.lakeshore.plane.job_token import with_job_tokens
from dreamlake.lakeshore.plane.store import MAX_BATCH, SqlStore, topic_channel
from dreamlake.lakeshore.plane.store.records import check_rank
from dreamlake.lakeshore.plane.wakeup import reading
from dreamlake.lakeshore.types import (
    MAX_LEASE_S,
    Ack,
    Claim,
    ClaimArgs,
    Frame,
    GangState,
    check_name,
)

from .endpoint import Api, Call
from .longpoll import claim_until, hung_up, run_write, wait_until
from .metrics import count_acks
from .routes_invocations import _host, _wait_s, refuse_code
from .routes_objects import drop_superseded
from .wire import Fields

#: A claim's defaults, where its body leaves a field out: `ClaimArgs`'s own.
CLAIM_DEFAULTS = ClaimArgs._field_defaults


async def claim(call: Call) -> dict[str, Any]:
    """`{claim}` for one job; with `limit`, `{claims: [...]}`: up to that many in one commit.

    `acks` (as `POST /acks` takes them) are settled first, in the claim's transaction when a
    job is there, and committed before any wait: the answer then carries `ack_errors`, per ack
    null or its refusal. A worker that just finished a job takes its next one in one request.
    """
    b = call.body
    b.only(
        "queues",
        "worker",
        "lease_s",
        "kind",
        "temperature",
        "wait",
        "limit",
        "host",
        "acks",
        "free",
        "addr",
    )
    queues = b.str_list("queues")
    worker = b.req_text("worker")
    host = _host(b)
    lease_s = b.number("lease_s", CLAIM_DEFAULTS["lease_s"]) or 0.0
    if not 0 < lease_s <= MAX_LEASE_S:
        raise InvalidArgument(f"field 'lease_s' must be in (0, {MAX_LEASE_S:g}]")
    kind = b.text("kind")
    temperature = b.number("temperature", CLAIM_DEFAULTS["temperature"]) or 0.0
    if temperature < 0:
        raise InvalidArgument("field 'temperature' must be >= 0")
    wait_s = b.number("wait", 0.0) or 0.0
    batch = "limit" in b.data
    limit = b.integer("limit", 1)
    if not 1 <= limit <= MAX_BATCH:
        raise InvalidArgument(f"field 'limit' must be an integer in [1, {MAX_BATCH}]")
    acks = _acks(b) if "acks" in b.data else None

    free = b.mapping("free")
    addr = b.text("addr")
    args = ClaimArgs(queues, worker, lease_s, limit, kind, temperature, host, free, addr)
    out: dict[str, Any] = {}
    got: list[Claim] = []
    since = None
    if acks is not None:
        # The claim inside ack_and_claim saw every submit before this: the wait below need
        # not look again until one after it lands.
        since = call.store.waker.generation
        on_ended = call.readers.handing(a.id for a in acks)
        errors, got = await run_write(
            call.store,
            lambda: call.store.ack_and_claim(call.ns, acks, args, on_ended=on_ended),
        )
        out["ack_errors"] = [_item_error(e) for e in errors]
        await count_acks(call, [a.id for a in acks], errors)
        if on_ended is not None and not got:
            # A submit-and-wait here was handed its result: it answers before this claim
            # settles into its long-poll (a `q.call`'s producer is the one waiting).
            await asyncio.sleep(0)
    if not got:
        got = await claim_until(
            call.store, call.seats, call.ns, args, wait_s, call.request, since=since
        )
    if got and await hung_up(call.request):
        # Nobody will read these claims: give them back now rather than after the lease runs out.
        await call.run(lambda: [call.store.release(c.id, c.lease) for c in got])
        got = []
    key = call.store.signing_key
    if got and key is not None and call.token is not None:
        got = with_job_tokens(key, got, call.token)  # what the jobs hold instead of the worker's
    if batch:
        out["claims"] = got
    else:
        out["claim"] = got[0] if got else None
    return out


def _acks(b: Fields) -> list[Ack]:
    """The `acks` field of `POST /acks` or of a claim: at most MAX_BATCH `{id, lease, result}`."""
    items = b.items("acks")
    if len(items) > MAX_BATCH:
        raise InvalidArgument(f"field 'acks' takes at most {MAX_BATCH} items, not {len(items)}")
    acks = []
    for item in items:
        item.only("id", "lease", "result")
        acks.append(Ack(item.req_text("id"), item.req_text("lease"), item.blob("result")))
    return acks


def _item_error(error: DispatchError | None) -> dict[str, str] | None:
    return None if error is None else {"code": error.code, "message": str(error)}


async def ack_many(call: Call) -> dict[str, list[dict[str, str] | None]]:
    """Settle a batch as succeeded in one commit; per ack, null or the error it met."""
    call.body.only("acks")
    acks = _acks(call.body)
    on_ended = call.readers.handing(a.id for a in acks)
    errors = await run_write(
        call.store, lambda: call.store.ack_many(acks, ns=call.ns, on_ended=on_ended)
    )
    return {"errors": [_item_error(e) for e in errors]}


def _owned(store: SqlStore, ns: str, inv_id: str) -> None:
    store.invocation(ns, inv_id)  # NotFound for an id of another namespace


async def ack(call: Call) -> None:
    b = call.body
    b.only("lease", "result")
    lease, result = b.req_text("lease"), b.blob("result")

    # The namespace is checked inside the settle's own transaction: no read before it.
    inv_id = call.param("id")
    on_ended = call.readers.handing([inv_id])
    await run_write(
        call.store, lambda: call.store.ack(inv_id, lease, result, ns=call.ns, on_ended=on_ended)
    )


async def nack(call: Call) -> dict[str, str]:
    b = call.body
    b.only("lease", "error", "retry")
    lease, error, retry = b.req_text("lease"), b.text("error") or "", b.boolean("retry", True)

    def run() -> str:
        _owned(call.store, call.ns, call.param("id"))
        return call.store.nack(call.param("id"), lease, error=error, retry=retry)

    return {"state": await call.run(run)}


async def end(call: Call) -> None:
    b = call.body
    b.only("lease", "state", "error", "cause")
    lease, state, error = b.req_text("lease"), b.req_text("state"), b.text("error") or ""
    cause = b.text("cause")

    def run() -> None:
        _owned(call.store, call.ns, call.param("id"))
        call.store.end(call.param("id"), lease, state=state, error=error, cause=cause)

    await call.run(run)


async def release(call: Call) -> dict[str, bool]:
    b = call.body
    b.only("lease", "outcome", "cause")
    lease = b.req_text("lease")
    outcome, cause = b.text("outcome") or "unrun", b.text("cause") or "notice"

    def run() -> bool:
        _owned(call.store, call.ns, call.param("id"))
        return call.store.release(call.param("id"), lease, outcome=outcome, cause=cause)

    return {"released": await call.run(run)}


async def place(call: Call) -> None:
    b = call.body
    b.only("lease", "placement")
    lease = b.req_text("lease")
    placement = b.mapping("placement")
    if placement is None:
        raise InvalidArgument(f"field '{b.where('placement')}' is required")

    def run() -> None:
        _owned(call.store, call.ns, call.param("id"))
        call.store.place(call.param("id"), lease, placement)

    await call.run(run)


async def note_cause(call: Call) -> dict[str, bool]:
    """Issue 35: why the worker is about to end this attempt, before it signals the job."""
    b = call.body
    b.only("lease", "cause")
    lease, cause = b.req_text("lease"), b.req_text("cause")
    noted = await call.run(
        lambda: call.store.note_cause(call.param("id"), lease, cause, ns=call.ns)
    )
    return {"noted": noted}


async def checkpoint(call: Call) -> dict[str, bytes | None]:
    """Issue 35: the job's last checkpoint, an encoded Ref (the state is in storage)."""
    b = call.body
    b.only("lease", "checkpoint")
    lease, data = b.req_text("lease"), b.blob("checkpoint")
    if data is None:
        raise InvalidArgument("field 'checkpoint' is required: the encoded Ref of the state")
    previous = await call.run(
        lambda: call.store.checkpoint(call.param("id"), lease, data, ns=call.ns)
    )
    if previous is not None and previous != data:  # the old one's plane-tier copy: gone
        tier = call.request.app.state.lakeshore_objects
        await call.run(drop_superseded, tier, call.ns, previous)
    return {"previous": previous}


async def renew(call: Call) -> dict[str, dict[str, bool]]:
    b = call.body
    b.only("leases", "lease_s")
    leases = b.str_list("leases")
    lease_s = b.number("lease_s", CLAIM_DEFAULTS["lease_s"]) or 0.0
    if not 0 < lease_s <= MAX_LEASE_S:
        raise InvalidArgument(f"field 'lease_s' must be in (0, {MAX_LEASE_S:g}]")
    return {"leases": await call.run(call.store.renew, leases, lease_s)}


async def gang(call: Call) -> GangState:
    """Issue 47: the gang attempt a part belongs to; `wait` long-polls for it to change."""
    b = call.body
    b.only("lease", "wait", "since")
    lease = b.req_text("lease")
    wait_s = b.number("wait", 0.0) or 0.0
    since = b.integer("since", -1) if "since" in b.data else None
    inv_id = call.param("id")

    def fetch() -> GangState:
        return call.store.gang(call.ns, inv_id, lease)

    first = await call.run(fetch)
    seen = first.version if since is None else since
    if wait_s <= 0 or first.version > seen:
        return first
    return await wait_until(
        call.store, fetch, lambda g: g.version > seen, wait_s, call.request, work=reading(inv_id)
    )


async def gang_notice(call: Call) -> GangState:
    """Issue 47: a part's box got a preemption notice; every other part is told."""
    b = call.body
    b.only("lease", "until")
    lease = b.req_text("lease")
    until: Any = b.data.get("until")  # as sent: the store refuses a bad one in every plane's words
    return await call.run(
        lambda: call.store.gang_notice(call.ns, call.param("id"), lease, until=until)
    )


async def gang_progress(call: Call) -> GangState:
    """Issue 47: a gang's part moved (what its hang_timeout_s watches)."""
    b = call.body
    b.only("lease", "hung")
    lease, hung = b.req_text("lease"), b.boolean("hung")
    return await call.run(
        lambda: call.store.gang_progress(call.ns, call.param("id"), lease, hung=hung)
    )


async def gang_ready(call: Call) -> GangState:
    """Issue 47: where a gang's part listens (rank 0's port is the gang's MASTER_PORT)."""
    b = call.body
    b.only("lease", "addr", "port")
    lease, addr = b.req_text("lease"), b.text("addr")
    port = b.data.get("port")  # as sent: the store refuses a bad one in every plane's words
    return await call.run(
        lambda: call.store.gang_ready(call.ns, call.param("id"), lease, addr=addr, port=port)
    )


# -- frames: an invocation's journal, or a topic's ---------------------------------------------


def _topic(call: Call) -> str:
    queue = check_name(call.param("queue"))
    return topic_channel(call.ns, queue, check_name(call.param("topic"), "topic"))


async def _read_frames(
    call: Call, channel: str, inv_id: str | None, rank: int = 0
) -> dict[str, Any]:
    """`ended` says the invocation is terminal with no frame after `since`: stop waiting."""
    since = call.query.integer("since", -1)
    wait_s = _wait_s(call)

    def fetch() -> tuple[list[Frame], bool]:
        inv = call.store.invocation(call.ns, inv_id) if inv_id is not None else None
        frames = call.store.frames(channel, since, rank=rank)
        return frames, inv is not None and inv.terminal and not frames

    frames, ended = await wait_until(
        call.store,
        fetch,
        lambda r: bool(r[0]) or r[1],
        wait_s,
        call.request,
        work=reading(channel),
        read=True,
    )
    return {"frames": frames, "ended": ended}


async def _post_frame(call: Call, channel: str, inv_id: str | None) -> dict[str, int]:
    b = call.body
    b.only("kind", "value", "lease", "id")
    kind, value, lease = b.req_text("kind"), b.blob("value"), b.text("lease")
    post_id = b.text("id")
    if inv_id is None:
        # A topic value is read by listeners who may opt in to pickles: posting one that
        # carries code needs the scope that submitting it would. A job's own frames are its
        # worker's output, which readers decode as plain values unless they trust the worker.
        await refuse_code(call, [("the topic value", value)])

    def run() -> int:
        if inv_id is not None:
            _owned(call.store, call.ns, inv_id)
        return call.store.post(channel, kind, value, lease=lease, post_id=post_id)

    return {"seq": await call.run(run)}


async def invocation_frames(call: Call) -> dict[str, Any]:
    rank = check_rank(call.query.integer("rank", 0))
    return await _read_frames(call, call.param("id"), call.param("id"), rank)


async def post_invocation_frame(call: Call) -> dict[str, int]:
    return await _post_frame(call, call.param("id"), call.param("id"))


async def topic_frames(call: Call) -> dict[str, Any]:
    return await _read_frames(call, _topic(call), None)


async def post_topic_frame(call: Call) -> dict[str, int]:
    return await _post_frame(call, _topic(call), None)


ROUTES = [
    Api(
        routes.CLAIM,
        claim,
        "Claim the next job; 'limit' claims up to that many in one commit ({claims: [...]}); "
        "'wait' long-polls (capped at 60 s) for the first",
        body="ClaimRequest",
        response="ClaimResult",
        scopes=(WORK,),
    ),
    Api(
        routes.ACKS,
        ack_many,
        "Settle up to 1000 claims as succeeded in one commit; per ack, null or its error",
        body="AckBatch",
        response="AckErrors",
        scopes=(WORK,),
    ),
    Api(
        routes.ACK,
        ack,
        "Settle as succeeded with the result bytes",
        status=204,
        body="Ack",
        scopes=(WORK,),
    ),
    Api(
        routes.NACK,
        nack,
        "Fail this attempt; retry requeues with backoff",
        body="Nack",
        response="NackResult",
        scopes=(WORK,),
    ),
    Api(
        routes.END,
        end,
        "End an attempt as killed, timeout or failed",
        status=204,
        body="End",
        scopes=(WORK,),
    ),
    Api(
        routes.RELEASE,
        release,
        "Give a claimed job back unrun",
        body="Release",
        response="Released",
        scopes=(WORK,),
    ),
    Api(
        routes.PLACE,
        place,
        "Record where a claimed attempt runs (worker, GPU indexes and UUIDs); needs its lease",
        status=204,
        body="Placement",
        scopes=(WORK,),
    ),
    Api(
        routes.CAUSE,
        note_cause,
        "Record why the worker is about to end this running attempt, before it signals the job",
        body="Cause",
        response="Noted",
        scopes=(WORK,),
    ),
    Api(
        routes.CHECKPOINT,
        checkpoint,
        "Record the job's last checkpoint (the encoded Ref of its state in durable storage) "
        "under the attempt's lease; answers the one it replaced",
        body="Checkpoint",
        response="Checkpointed",
        scopes=(WORK,),
    ),
    Api(
        routes.RENEW,
        renew,
        "Extend leases; returns {id: kill_requested}",
        body="Renew",
        response="Renewed",
        scopes=(WORK,),
    ),
    Api(
        routes.GANG,
        gang,
        "Issue 47: the gang attempt the part under this lease belongs to (holding, started, "
        "ended, its parts' ranks, workers, addresses and ports); 'wait' long-polls (capped at "
        "60 s) for it to change",
        body="GangRead",
        response="GangState",
        scopes=(WORK,),
    ),
    Api(
        routes.GANG_NOTICE,
        gang_notice,
        "Issue 47: a gang's part's box got a preemption notice (its grace ends at `until`): "
        "every other part is told, so each gets the grace to checkpoint",
        body="GangNotice",
        response="GangState",
        scopes=(WORK,),
    ),
    Api(
        routes.GANG_PROGRESS,
        gang_progress,
        "Issue 47: a gang's part moved (a frame, a checkpoint, dls.run.progress()): the gang's "
        "progress_at, what its hang_timeout_s is measured from; `hung`: its daemon found the "
        "gang hung, and every part dumps its stacks",
        body="GangProgress",
        response="GangState",
        scopes=(WORK,),
    ),
    Api(
        routes.GANG_READY,
        gang_ready,
        "Issue 47: say where a gang's part listens (its address, a port it found free: rank "
        "0's is the gang's MASTER_PORT) while its attempt is live",
        body="GangReady",
        response="GangState",
        scopes=(WORK,),
    ),
    Api(
        routes.FRAMES,
        invocation_frames,
        "Frames after ?since; ?wait long-polls for one or for the end; ?rank: a gang's part's "
        "own (issue 47; 0, the job's, by default)",
        response="FrameList",
        query=("since", "wait", "rank"),
        scopes=(READ,),
    ),
    Api(
        routes.POST_FRAME,
        post_invocation_frame,
        "Append a frame to a running invocation's journal (needs its lease)",
        status=201,
        body="PostFrame",
        response="Seq",
        scopes=(WORK,),
    ),
    Api(
        routes.TOPIC_FRAMES,
        topic_frames,
        "Frames of a topic after ?since; ?wait long-polls",
        response="FrameList",
        query=("since", "wait"),
        scopes=(READ,),
    ),
    Api(
        routes.POST_TOPIC_FRAME,
        post_topic_frame,
        "Append a frame to a topic",
        status=201,
        body="PostFrame",
        response="Seq",
        scopes=(SUBMIT_DATA, WORK, JOB),
    ),
]
