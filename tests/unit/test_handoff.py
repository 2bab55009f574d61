"""A submit hands its job to a claim held on the server, in the submit's own transaction; an
ack hands its result to the submit-and-wait held there, from the settle's own statement.

In-process, through the ASGI app (no socket), so the store's calls can be counted: the proof
that the claim needed no transaction of its own, and the result no read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import msgpack
import pytest

from dreamlake.lakeshore.errors import DispatchError
from dreamlake.lakeshore.plane import waiting as waiting_module
from dreamlake.lakeshore.plane.dispatch import open_store
from dreamlake.lakeshore.plane.store import SqlStore
from dreamlake.lakeshore.plane.store.base import new_id
from dreamlake.lakeshore.plane.wakeup import reading
from dreamlake.lakeshore.server.app import create_app
from dreamlake.lakeshore.server.handoff import Readers, Seat, Seats, hand
from dreamlake.lakeshore.types import Ack, Claim, ClaimArgs, SubmitRequest
from tests.support import claiming
from tests.support.spies import counted

NS = "/v1/namespaces/default"


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SqlStore]:
    # Only a wake-up ends a wait here: a safety poll under load would read a row these tests
    # count the reads of.
    monkeypatch.setattr(waiting_module, "SAFETY_POLL_S", 60.0)
    store = open_store(tmp_path / "plane.db")
    store.ensure_namespace("default")
    yield store
    store.close()


def serve(store: SqlStore, scenario: Callable[[Client], Awaitable[None]]) -> None:
    app = create_app(store)
    token = store.create_token("default", label="test", admin=True)

    async def main() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport,
            base_url="http://test",
            headers={"authorization": f"Bearer {token}", "content-type": "application/msgpack"},
            timeout=30,
        ) as http:
            await scenario(Client(http, app.state.lakeshore.seats, app.state.lakeshore.readers))

    asyncio.run(main())


async def until(ready: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    """Poll `ready` on this loop, each turn a millisecond apart, up to `timeout`."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not ready():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"waited {timeout} s for {what}")
        await asyncio.sleep(0.001)


async def turns(n: int = 20) -> None:
    """Turns of this loop, for a task that a wake-up already scheduled to run."""
    for _ in range(n):
        await asyncio.sleep(0)


class Client:
    def __init__(self, http: httpx.AsyncClient, seats: Seats, readers: Readers) -> None:
        self.http = http
        self.seats = seats
        self.readers = readers

    async def post(self, path: str, body: dict[str, Any], **params: Any) -> Any:
        response = await self.http.post(
            NS + path, content=msgpack.packb(body), params=params or None
        )
        assert response.status_code < 300, response.text
        return msgpack.unpackb(response.content) if response.content else None

    async def held(self, key: str = "default/q", n: int = 1) -> None:
        """Until `n` claims hold a seat under `key` (each is a task of this loop)."""
        await until(lambda: len(self.seats._by_key.get(key, ())) >= n, f"a seat under {key}")

    def claim(self, **fields: Any) -> asyncio.Task[Any]:
        body = {"queues": ["q"], "worker": "w1", "wait": 20.0, **fields}
        return asyncio.ensure_future(self.post("/claims", body))

    async def call(self, payload: bytes) -> tuple[asyncio.Task[Any], dict[str, Any]]:
        """A submit-and-wait, once its job is running: the request, and the job's claim."""
        claim = self.claim()
        await self.held()
        call = asyncio.ensure_future(
            self.post("/queues/q/invocations", {"payload": payload}, result_wait=20)
        )
        got = (await claim)["claim"]
        await until(lambda: got["id"] in self.readers._by_id, "the submit-and-wait to sit down")
        return call, got


def test_a_held_claim_takes_the_job_with_the_submits_commit(store: SqlStore) -> None:
    claims = counted(store, "claim_many")

    async def scenario(c: Client) -> None:
        claim = c.claim()
        await c.held()
        ids = (await c.post("/queues/q/invocations", {"payload": b"\x01"}))["ids"]
        got = (await claim)["claim"]

        assert got["id"] == ids[0] and got["payload"] == b"\x01"
        assert claims() == 1  # the claim that found nothing; the job came with the submit
        assert store.invocation("default", ids[0]).state == "running"
        assert c.seats._by_key == {}
        await c.post(f"/invocations/{ids[0]}/ack", {"lease": got["lease"], "result": b"ok"})
        assert store.invocation("default", ids[0]).state == "succeeded"

    serve(store, scenario)


def test_a_batch_is_shared_among_held_claims_oldest_first(store: SqlStore) -> None:
    async def scenario(c: Client) -> None:
        first = c.claim(worker="w1", limit=2)
        await c.held()
        second = c.claim(worker="w2")
        await c.held(n=2)
        third = c.claim(worker="w3")
        await c.held(n=3)
        items = [{"payload": bytes([i])} for i in range(3)]
        ids = (await c.post("/queues/q/invocations", {"items": items}))["ids"]

        one, two = (await first)["claims"], (await second)["claim"]
        assert [x["id"] for x in one] == ids[:2] and two["id"] == ids[2]
        assert next(iter(c.seats._by_key["default/q"])).args.worker == "w3"  # still waiting
        ids = (await c.post("/queues/q/invocations", {"payload": b"\x09"}))["ids"]
        assert (await third)["claim"]["id"] == ids[0]

    serve(store, scenario)


def test_a_claim_handed_nothing_goes_back_to_waiting(store: SqlStore) -> None:
    """A job held for another host (a locality window) is not this claimer's to take."""
    store.create_queue("default", "q", admission={"locality_wait_s": 30.0})

    async def scenario(c: Client) -> None:
        claim = c.claim(host="box-a")
        await c.held()
        await c.post("/queues/q/invocations", {"payload": b"\x01", "host": "box-b"})
        await c.held()  # seated again after the submit handed it nothing
        ids = (await c.post("/queues/q/invocations", {"payload": b"\x02"}))["ids"]

        assert (await claim)["claim"]["id"] == ids[0]
        assert store.count("default", "q", "queued") == 1

    serve(store, scenario)


def test_a_submit_refused_by_admission_hands_nothing_and_changes_nothing(
    store: SqlStore,
) -> None:
    admission = {"max_depth": 1, "on_full": "reject", "locality_wait_s": 30.0}
    store.create_queue("default", "q", admission=admission)
    store.submit("default", "q", [SubmitRequest(payload=b"\x00", host="box-b")])  # full now

    async def scenario(c: Client) -> None:
        claim = c.claim(wait=0.5, host="box-a")  # the queued job is held for another host
        await c.held()
        response = await c.http.post(
            NS + "/queues/q/invocations", content=msgpack.packb({"payload": b"\x01"})
        )

        assert response.status_code == 429
        assert (await claim)["claim"] is None
        assert store.count("default", "q", "queued") == 1
        assert c.seats._by_key == {}

    serve(store, scenario)


def test_the_store_claims_for_the_claimers_in_the_submits_transaction(store: SqlStore) -> None:
    store.submit("default", "q", [SubmitRequest(payload=b"\x00")])  # an older job goes first
    args = [ClaimArgs(["q"], "w1", 60.0, limit=1), ClaimArgs(["q"], "w2", 60.0, limit=5)]

    request = SubmitRequest(payload=b"\x01", id=new_id())
    ids, handed = store.submit_handing("default", "q", [request], args)

    assert [[c.payload for c in got] for got in handed] == [[b"\x00"], [b"\x01"]]
    assert handed[1][0].id == ids[0]
    assert store.count("default", "q", "running") == 2
    # The same submit sent again (its answer lost) claims nothing more.
    again, none = store.submit_handing("default", "q", [request], args)
    assert again == ids and none == [[], []]


def test_claims_handed_to_a_claimer_that_went_away_come_back_for_release() -> None:
    """A claimer torn down while the submit's write ran (its wait on `handed` cancelled)
    cannot answer: its claims go back to the caller, to release, not to the lease's end."""
    claim = Claim("01J0", "default", "q", b"", 1, "lease", 0.0, None)

    async def main() -> tuple[list[Claim], list[Claim], bool]:
        seats = Seats()
        args = ClaimArgs(["q"], "w1", 60.0)
        with seats.held("default", args, ["default/q"]), seats.held("default", args, ["default/q"]):
            gone, waiting = seats.take("default/q", 2)
        assert gone.handed is not None and waiting.handed is not None
        gone.handed.cancel()
        orphaned = hand([gone, waiting], [[claim], []])
        return orphaned, waiting.handed.result(), waiting.wake.done()

    assert asyncio.run(main()) == ([claim], [], True)


def test_a_draining_workers_seats_are_let_go_and_no_submit_takes_them() -> None:
    """`dismiss` wakes only that worker's seats in that namespace, marked dismissed, and takes
    them off their keys: a submit then hands its jobs to the other claimers, not to a worker
    that would only give them back."""

    async def main() -> tuple[int, list[bool], list[Seat]]:
        seats = Seats()
        mine = ClaimArgs(["q"], "draining", 60.0)
        other = ClaimArgs(["q"], "busy", 60.0)
        with (
            seats.held("default", mine, ["default/q", "default/r"]) as a,
            seats.held("other-ns", mine, ["other-ns/q"]) as b,
            seats.held("default", other, ["default/q"]) as c,
        ):
            let_go = seats.dismiss("default", "draining")
            taken = seats.take("default/q", 2) + seats.take("default/r", 1)
            return let_go, [s.dismissed and s.wake.done() for s in (a, b, c)], taken

    let_go, dismissed, taken = asyncio.run(main())
    assert let_go == 1
    assert dismissed == [True, False, False]
    assert [seat.args.worker for seat in taken] == ["busy"]


def test_an_ack_riding_on_a_claim_hands_its_result_to_the_submit_and_wait(
    store: SqlStore,
) -> None:
    async def scenario(c: Client) -> None:
        call, job = await c.call(b"\x01")
        reads = counted(store, "invocation")
        ack = {"id": job["id"], "lease": job["lease"], "result": b"done"}
        answer = await c.post("/claims", {"queues": ["q"], "worker": "w1", "acks": [ack]})
        inv = (await call)["invocation"]

        assert answer["ack_errors"] == [None]
        assert (inv["id"], inv["state"], inv["result"]) == (job["id"], "succeeded", b"done")
        assert reads() == 0  # handed over: nobody read the row back
        read = await c.http.get(f"{NS}/invocations/{job['id']}")
        assert inv == msgpack.unpackb(read.content)  # what a read says
        assert c.readers._by_id == {}

    serve(store, scenario)


def test_a_plain_ack_hands_its_result_and_a_refused_one_hands_nothing(
    store: SqlStore,
) -> None:
    async def scenario(c: Client) -> None:
        call, job = await c.call(b"\x01")
        reads = counted(store, "invocation")
        stale = await c.http.post(
            f"{NS}/invocations/{job['id']}/ack",
            content=msgpack.packb({"lease": "not-the-lease", "result": b"x"}),
        )
        assert stale.status_code == 409
        await turns()  # for a reader the refusal woke to read (it changed nothing)
        assert not call.done() and not c.readers._by_id[job["id"]][0].wake.done()
        await c.post(f"/invocations/{job['id']}/ack", {"lease": job["lease"], "result": b"ok"})

        assert (await call)["invocation"]["result"] == b"ok"
        assert reads() == 0

    serve(store, scenario)


def test_a_result_that_ends_elsewhere_is_read_and_other_endings_wake_no_reader(
    store: SqlStore,
) -> None:
    """An ack this server's routes never saw (another replica's, another process's) wakes the
    reader to read the row. Another invocation's ack wakes it not at all (only that one's
    readers); a change that may concern any reader wakes it to read once, not into a spin."""

    async def scenario(c: Client) -> None:
        call, job = await c.call(b"\x01")
        other, other_job = await c.call(b"\x02")
        reads = counted(store, "invocation")
        await c.post(f"/invocations/{other_job['id']}/ack", {"lease": other_job["lease"]})
        await other
        assert reads() == 0

        store.waker.notify()  # what any write that may end an invocation or post a frame sends
        await until(lambda: reads() > 0, "the woken reader to read")
        await turns()  # for a reader that would not settle back down
        assert reads() == 1

        store.ack(job["id"], job["lease"], b"elsewhere", ns="default")
        inv = (await call)["invocation"]
        assert inv["result"] == b"elsewhere" and reads() == 2

    serve(store, scenario)


POOL = {"kind": "elastic", "min": 0, "max": 2, "pool": "mixed", "steal_delay_s": 60}


def test_a_held_claim_is_not_handed_a_job_it_may_only_steal_later(store: SqlStore) -> None:
    """A pool worker (primary `pool-a`) waiting on both queues: a fresh `pool-b` job stays for
    `pool-b`'s own workers until it has waited `steal_delay_s`; a `pool-a` one is its own."""
    for name in ("pool-a", "pool-b"):
        store.create_queue("default", name, elasticity=POOL)
    keys = ["default/pool-a", "default/pool-b"]

    async def scenario(c: Client) -> None:
        claim = c.claim(queues=["pool-a", "pool-b"])
        await c.held(keys[1])
        (stolen,) = (await c.post("/queues/pool-b/invocations", {"payload": b"\x01"}))["ids"]
        await until(
            lambda: claim.done() or bool(c.seats._by_key.get(keys[1])),
            "the claim to answer or sit down again",
        )
        assert not claim.done(), f"handed {claim.result()} before it waited 60 s"
        (own,) = (await c.post("/queues/pool-a/invocations", {"payload": b"\x02"}))["ids"]

        assert (await claim)["claim"]["id"] == own
        assert store.invocation("default", stolen).state == "queued"

    serve(store, scenario)


def test_the_store_hands_a_claimer_only_jobs_of_the_submitted_queue(store: SqlStore) -> None:
    """The claimer's other queues are left alone (they had nothing when it last looked, and a
    submit that went on to lock their rows could deadlock another submit); the steal rule
    still reads the claimer's whole list: `pool-b` is not its primary."""
    for name in ("pool-a", "pool-b"):
        store.create_queue("default", name, elasticity=POOL)
    store.submit("default", "other", [SubmitRequest(payload=b"\x00")])
    args = [ClaimArgs(["other", "q"], "w1", 60.0, limit=5)]
    ids, handed = store.submit_handing("default", "q", [SubmitRequest(payload=b"\x01")], args)
    assert [[c.id for c in got] for got in handed] == [ids]

    args = [ClaimArgs(["pool-a", "pool-b"], "w1", 60.0, limit=5)]
    _, handed = store.submit_handing("default", "pool-b", [SubmitRequest(payload=b"\x02")], args)
    assert handed == [[]]
    assert store.count("default", "pool-b", "queued") == 1


def test_a_refused_ack_wakes_no_reader_of_its_invocation(store: SqlStore) -> None:
    """It changed nothing: its readers would only read the row they hold again. The same for
    an ack that rides on a claim, whose claim still runs."""
    (inv_id,) = store.submit("default", "q", [SubmitRequest(payload=b"\x01")])
    (job,) = claiming.store_claim_many(store, "default", ["q"], worker="w1", lease_s=60.0, limit=1)
    readers = reading(inv_id)
    before = store.waker.generation

    with pytest.raises(DispatchError):
        store.ack(inv_id, "not-the-lease", b"x", ns="default")
    errors, _ = claiming.store_ack_and_claim(
        store,
        "default",
        [Ack(inv_id, "not-the-lease", b"x")],
        ["q"],
        worker="w1",
        lease_s=60.0,
        limit=1,
    )

    assert errors[0] is not None
    assert not store.waker.work_since(before, readers)
    store.ack(inv_id, job.lease, b"ok", ns="default")
    assert store.waker.work_since(before, readers)
