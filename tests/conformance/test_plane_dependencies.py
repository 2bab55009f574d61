"""Dependencies on every plane (issue 36, item 4): a job submitted with `after` waits as
`waiting` (counted, listed, cancellable) until its parents succeed; the last parent's ack releases
it in the same transaction; a parent that fails, is cancelled, times out or loses its worker
cancels it, naming the parent, and its own dependents with it, unless after_failure="run"; an
unknown parent (or another namespace's, or a later one in the batch) is refused with nothing
stored; `dls.output(id)` hands the parent's result to the worker in the argument's place.
"""

from __future__ import annotations

import time

import pytest
from planes import PlaneEnv, eventually

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import DispatchError, InvalidArgument, NotFound
from dreamlake.lakeshore.types import SubmitRequest
from tests.support import claiming


def _run_one(plane: PlaneEnv, queue: str, result: object = None) -> str:
    """Claim the next job of `queue` and ack it with `result`; its id."""
    q = plane.queue(queue)
    job = q.claim(wait=10)
    assert job is not None, f"nothing to claim on {queue}"
    q.ack(job, result)
    return job.id


def _fail_one(plane: PlaneEnv, queue: str) -> str:
    q = plane.queue(queue)
    job = q.claim(wait=10)
    assert job is not None
    q.nack(job, error="boom", retry=False)
    return job.id


def test_a_dependent_waits_until_its_parent_succeeds(plane: PlaneEnv) -> None:
    parents, children = plane.queue("prep"), plane.queue("train")
    parent = parents.submit({"stage": "prep"})
    child = children.submit({"stage": "train"}, after=[parent])
    inv = plane.dispatch.invocation(child)
    assert inv.state == "waiting" and not inv.terminal
    assert children.count("waiting") == 1 and children.count("queued") == 0
    assert [r.id for r in plane.dispatch.invocations(state="waiting")] == [child]
    assert children.claim() is None  # a claim never takes a waiting job
    assert _run_one(plane, "prep", "ok") == parent
    assert plane.dispatch.invocation(child).state == "queued"
    assert children.count("waiting") == 0
    assert _run_one(plane, "train") == child
    assert plane.recount() == []


def test_a_failed_parent_cancels_its_dependents_transitively_naming_it(plane: PlaneEnv) -> None:
    q = plane.queue("chain")
    root = q.submit("root")
    child = q.submit("child", after=[root])
    grandchild = q.submit("grandchild", after=[child])
    assert _fail_one(plane, "chain") == root
    for inv_id in (child, grandchild):
        inv = plane.dispatch.invocation(inv_id)
        assert inv.state == "cancelled"
        assert inv.error is not None
    assert f"parent {root} ended failed" in (plane.dispatch.invocation(child).error or "")
    assert f"parent {child} ended cancelled" in (plane.dispatch.invocation(grandchild).error or "")
    with pytest.raises(DispatchError, match=f"parent {root} ended failed"):
        q.result(child, timeout=1)
    assert q.count("waiting") == 0 and q.claim() is None


def test_after_failure_run_runs_once_every_parent_has_ended(plane: PlaneEnv) -> None:
    q = plane.queue("cleanup")
    ok, bad = q.submit("ok"), q.submit("bad")
    cleanup = q.submit("cleanup", after=[ok, bad], after_failure="run")
    assert _run_one(plane, "cleanup") == ok
    assert plane.dispatch.invocation(cleanup).state == "waiting"
    assert _fail_one(plane, "cleanup") == bad
    assert plane.dispatch.invocation(cleanup).state == "queued"
    assert _run_one(plane, "cleanup") == cleanup


def test_cancelling_a_root_cancels_its_waiting_descendants(plane: PlaneEnv) -> None:
    q = plane.queue("roots")
    root = q.submit("root")
    kids = [q.submit(f"kid-{i}", after=[root]) for i in range(3)]
    leaf = q.submit("leaf", after=kids)
    assert q.cancel(root)
    states = {plane.dispatch.invocation(i).state for i in (*kids, leaf)}
    assert states == {"cancelled"}
    assert q.count("waiting") == 0
    assert plane.recount() == []


def test_a_waiting_job_is_cancellable_and_its_parent_still_runs(plane: PlaneEnv) -> None:
    q = plane.queue("cancel-waiting")
    parent = q.submit("p")
    child = q.submit("c", after=[parent])
    assert q.cancel(child)
    assert plane.dispatch.invocation(child).state == "cancelled"
    assert _run_one(plane, "cancel-waiting") == parent
    assert plane.dispatch.invocation(child).state == "cancelled"
    assert q.claim() is None


def test_a_join_is_released_by_its_last_parent_only(plane: PlaneEnv) -> None:
    q = plane.queue("join")
    parents = q.submit_many([{"i": i} for i in range(5)])
    join = q.submit("join", after=parents)
    for n in range(5):
        assert plane.dispatch.invocation(join).state == "waiting", n
        job = q.claim(wait=10)
        assert job is not None and job.id in parents
        q.ack(job, n)
    assert plane.dispatch.invocation(join).state == "queued"
    assert _run_one(plane, "join") == join
    assert q.claim() is None


def test_parents_on_other_queues_and_an_already_ended_parent(plane: PlaneEnv) -> None:
    a, b = plane.queue("dep-a"), plane.queue("dep-b")
    done = a.submit("done")
    _run_one(plane, "dep-a")
    live = b.submit("live")
    child = plane.queue("dep-c").submit("child", after=[done, live])
    assert plane.dispatch.invocation(child).state == "waiting"
    _run_one(plane, "dep-b")
    assert plane.dispatch.invocation(child).state == "queued"
    failed = a.submit("fails")
    _fail_one(plane, "dep-a")
    late = b.submit("late", after=[failed])  # the parent had failed before: cancelled at once
    inv = plane.dispatch.invocation(late)
    assert inv.state == "cancelled" and f"parent {failed} ended failed" in (inv.error or "")


def test_a_batch_may_name_parents_earlier_in_the_same_batch(plane: PlaneEnv) -> None:
    q = plane.queue("batch")
    ids = [dls.new_id() for _ in range(3)]
    got = q.submit_many(["a", "b", "c"], ids=ids, after_each=[None, [ids[0]], [ids[0], ids[1]]])
    assert got == ids
    assert [plane.dispatch.invocation(i).state for i in ids] == ["queued", "waiting", "waiting"]
    assert _run_one(plane, "batch") == ids[0]
    assert _run_one(plane, "batch") == ids[1]
    assert _run_one(plane, "batch") == ids[2]


def test_unknown_later_or_foreign_parents_are_refused_and_nothing_is_stored(
    plane: PlaneEnv,
) -> None:
    q = plane.queue("refused")
    with pytest.raises(NotFound, match="unknown parent invocation"):
        q.submit("x", after=[dls.new_id()])
    ids = [dls.new_id() for _ in range(2)]
    with pytest.raises(InvalidArgument, match="before its child"):
        q.submit_many(["a", "b"], ids=ids, after_each=[[ids[1]], None])
    with pytest.raises(InvalidArgument, match="before its child"):
        q.submit_many(["a"], ids=ids[:1], after_each=[[ids[0]]])
    with pytest.raises(InvalidArgument, match="after_failure"):
        q.submit("x", after=[q.submit("p")], after_failure="ignore")
    foreign = plane.on_store(
        lambda store: store.submit("elsewhere", "refused", [SubmitRequest(payload=b"\xc0")])[0]
    )
    with pytest.raises(NotFound, match=foreign):
        q.submit("x", after=[foreign])
    assert q.count("waiting") == 0
    assert q.count("queued") == 1  # only the parent submitted for the after_failure case


def test_a_lost_worker_cancels_the_dependent_within_a_sweep(plane: PlaneEnv) -> None:
    q = plane.queue("lost")
    # No preemption left: a lease that runs out ends it failed ("for good"), not requeued.
    parent = q.submit("p", max_attempts=1, max_preemptions=0)
    plane.dispatch.submit("lost", [SubmitRequest(payload=b"\xc0", after=(parent,))])
    claim = claiming.claim(plane.dispatch, ["lost"], worker="gone", lease_s=0.2)
    assert claim is not None and claim.id == parent
    # Nobody settles it: the lease runs out; a sweep (any claim's) ends the parent and, in the
    # same transaction, cancels the dependent.
    child = plane.dispatch.invocations(state="waiting")[0].id

    def cancelled() -> bool:
        claiming.claim(plane.dispatch, ["lost"], worker="sweeper", lease_s=5)
        return plane.dispatch.invocation(child).state == "cancelled"

    eventually(cancelled, timeout=30, every=0.2)
    assert parent in (plane.dispatch.invocation(child).error or "")


def test_output_hands_the_parents_result_to_the_worker(plane: PlaneEnv) -> None:
    q = plane.queue("pipeline")
    prepared = q.submit(dls.thunk(_prepare, 4))
    trained = q.submit(dls.thunk(_train, dls.output(prepared), lr=0.5))
    evaluated = q.submit(dls.thunk(_evaluate, {"model": dls.output(trained)}))
    assert plane.dispatch.invocation(evaluated).state == "waiting"
    for _ in range(3):
        job = claiming.claim(plane.dispatch, ["pipeline"], worker="w", lease_s=30)
        assert job is not None
        from dreamlake.lakeshore import codec, spill
        from dreamlake.lakeshore.execute import run_body

        value = run_body(codec.decode(job.payload), lambda _: None, inputs=job.inputs)
        plane.dispatch.ack(job.id, job.lease, spill.dumps(value))
    assert q.result(evaluated, timeout=5) == 3.0


def test_the_same_key_returns_the_same_waiting_job(plane: PlaneEnv) -> None:
    q = plane.queue("keyed-deps")
    parent = q.submit("p")
    child = q.submit("c", key="after-p", after=[parent])
    assert q.submit("c", key="after-p", after=[parent]) == child
    assert q.count("waiting") == 1
    _run_one(plane, "keyed-deps")
    assert plane.dispatch.invocation(child).state == "queued"


def test_a_delayed_dependent_is_scheduled_when_released(plane: PlaneEnv) -> None:
    q = plane.queue("later-deps")
    parent = q.submit("p")
    child = q.submit("c", after=[parent], delay_s=3600)
    assert plane.dispatch.invocation(child).state == "waiting"
    _run_one(plane, "later-deps")
    assert plane.dispatch.invocation(child).state == "scheduled"
    assert q.claim() is None
    started = time.time()
    soon = q.submit("soon", after=[q.submit("p2")], at=started + 0.2)
    _run_one(plane, "later-deps")
    job = q.claim(wait=20)
    assert job is not None and job.id == soon


def _prepare(n: int) -> dict[str, int]:
    return {"rows": n}


def _train(data: dict[str, int], lr: float) -> dict[str, float]:
    return {"w": data["rows"] * lr}


def _evaluate(args: dict[str, dict[str, float]]) -> float:
    return args["model"]["w"] + 1


@pytest.mark.parametrize("state", ["timeout", "killed"])
def test_a_parent_ended_by_its_daemon_cancels_the_dependent(plane: PlaneEnv, state: str) -> None:
    q = plane.queue(f"ended-{state}")
    parent = q.submit("p")
    child = q.submit("c", after=[parent])
    job = claiming.claim(plane.dispatch, [f"ended-{state}"], worker="w", lease_s=30)
    assert job is not None and job.id == parent
    plane.dispatch.end(job.id, job.lease, state=state, error=f"the daemon ended it: {state}")
    inv = plane.dispatch.invocation(child)
    assert inv.state == "cancelled" and f"parent {parent} ended {state}" in (inv.error or "")


#: Deeper than SQLite's trigger nesting limit (1000), which a cancellation one level a
#: generation hit (issue 45, item 9).
DEEP = 1_100


def test_cancelling_the_root_of_a_deep_chain_cancels_every_dependent(plane: PlaneEnv) -> None:
    # given: a chain DEEP long, each job waiting on the one before, submitted in batches
    q = plane.queue("deep-chain")
    ids = [dls.new_id() for _ in range(DEEP)]
    for start in range(0, DEEP, 500):
        end = min(DEEP, start + 500)
        q.submit_many(
            [{"i": i} for i in range(start, end)],
            ids=ids[start:end],
            after_each=[[ids[i - 1]] if i else None for i in range(start, end)],
        )
    assert q.count("waiting") == DEEP - 1

    # when: the root is cancelled
    assert q.cancel(ids[0])

    # then: every dependent is cancelled, each naming its own parent, and the counts agree
    assert q.count("cancelled") == DEEP and q.count("waiting") == 0
    last = plane.dispatch.invocation(ids[-1])
    assert last.state == "cancelled" and ids[-2] in (last.error or "")
    assert plane.recount() == []
