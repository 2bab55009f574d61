"""Preemption (issue 35): a release with outcome `preempted` is not a failure, on every plane."""

from __future__ import annotations

from typing import Any

import pytest
from planes import PlaneEnv, eventually

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import DispatchError, InvalidArgument, LeaseLost, NotFound
from dreamlake.lakeshore.objects.plane import is_plane_url, tier_for
from dreamlake.lakeshore.storage import sniff_ref
from dreamlake.lakeshore.work.checkpoints import store_checkpoint
from tests.support import claiming


def test_a_preempted_job_is_requeued_at_once_without_spending_an_attempt(
    plane: PlaneEnv,
) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1, max_attempts=1)
    job = plane.peer.claim("gpu")
    assert job is not None

    assert plane.peer.call("release", id=job.id, lease=job.lease, outcome="preempted") is True

    row = q.status(inv)
    assert (row.state, row.attempt, row.preemptions, row.ended_by) == ("queued", 1, 1, "notice")
    # At once: no backoff delay before the next claim sees it (a nack's retry waits 0.5 s).
    (again,) = claiming.claim_many(plane.dispatch, ["gpu"], worker="w2", limit=1)
    assert again.id == inv and again.attempt == 2 and again.preemptions == 1
    plane.dispatch.ack(again.id, again.lease, None)
    done = q.status(inv)
    assert (done.state, done.attempt, done.preemptions, done.max_attempts) == (
        "succeeded",
        2,
        1,
        1,
    )


def test_a_preempted_job_keeps_its_place_ahead_of_later_submits(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    first = q.submit("first")
    job = plane.peer.claim("gpu")
    assert job is not None and job.id == first
    q.submit("second")

    plane.peer.call("release", id=job.id, lease=job.lease, outcome="preempted", cause="notice")

    (again,) = claiming.claim_many(plane.dispatch, ["gpu"], worker="w2", limit=1)
    assert again.id == first


def test_a_job_past_its_max_preemptions_fails_saying_so(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1, max_preemptions=1)
    for expected in (True, False):
        job = plane.peer.claim("gpu")
        assert job is not None
        released = plane.peer.call("release", id=job.id, lease=job.lease, outcome="preempted")
        assert released is expected

    row = q.status(inv)
    assert (row.state, row.preemptions, row.max_preemptions) == ("failed", 2, 1)
    assert "max_preemptions of 1" in (row.error or "")
    with pytest.raises(DispatchError, match="can never finish"):
        q.result(inv, timeout=5)


def test_a_queue_sets_the_max_preemptions_of_its_jobs(plane: PlaneEnv) -> None:
    plane.dispatch.create_queue("spot", admission={"max_preemptions": 0})
    q = plane.queue("spot")
    inv = q.submit(1)
    own = q.submit(2, max_preemptions=5)

    assert q.status(inv).max_preemptions == 0
    assert q.status(own).max_preemptions == 5
    job = plane.peer.claim("spot")
    assert job is not None and job.id == inv
    assert plane.peer.call("release", id=job.id, lease=job.lease, outcome="preempted") is False
    assert q.status(inv).state == "failed"


def test_preemptions_are_not_charged_against_max_attempts(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1, max_attempts=2)
    job = plane.peer.claim("gpu")
    assert job is not None
    plane.peer.call("release", id=job.id, lease=job.lease, outcome="preempted")

    second = plane.peer.claim("gpu")
    assert second is not None and second.attempt == 2
    plane.peer.nack(second, error="first failure")  # 1 of 2 attempts charged: retried
    assert q.status(inv).state == "queued"
    third = eventually(lambda: plane.peer.claim("gpu"), timeout=10)
    assert third.attempt == 3
    plane.peer.nack(third, error="second failure")

    row = q.status(inv)
    assert (row.state, row.attempt, row.preemptions, row.ended_by) == ("failed", 3, 1, "error")


def test_a_stale_preempted_release_changes_nothing(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1)
    job = plane.peer.claim("gpu")
    assert job is not None
    plane.peer.call("release", id=job.id, lease=job.lease)  # given back unrun

    assert plane.dispatch.release(job.id, job.lease, outcome="preempted") is False
    row = q.status(inv)
    assert (row.state, row.attempt, row.preemptions) == ("queued", 0, 0)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"outcome": "vanished"}, "unknown release outcome 'vanished'; use unrun|preempted"),
        ({"outcome": "preempted", "cause": "bored"}, "unknown end cause 'bored'; use notice"),
    ],
)
def test_a_release_with_a_bad_outcome_or_cause_is_refused(
    plane: PlaneEnv, fields: dict[str, str], match: str
) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1)
    job = plane.peer.claim("gpu")
    assert job is not None

    with pytest.raises(InvalidArgument, match=match):
        plane.dispatch.release(job.id, job.lease, **fields)

    row = q.status(inv)
    assert (row.state, row.preemptions) == ("running", 0)


@pytest.mark.parametrize("bad", [-1, 1001, 2.5, True])
def test_a_bad_max_preemptions_is_refused(plane: PlaneEnv, bad: object) -> None:
    q = plane.queue("gpu")
    refused = r"max_preemptions.? must be an? (integer 0\.\.1000|64-bit integer)"
    with pytest.raises(InvalidArgument, match=refused):
        q.submit(1, max_preemptions=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=r"admission\.max_preemptions must be an integer"):
        plane.dispatch.create_queue("spot", admission={"max_preemptions": bad})
    assert q.count("queued") == 0


def test_ends_record_their_cause_and_listings_show_preemptions(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    killed, timed = q.submit(1), q.submit(2)
    for inv, state in ((killed, "killed"), (timed, "timeout")):
        job = plane.peer.claim("gpu")
        assert job is not None and job.id == inv
        plane.dispatch.end(job.id, job.lease, state=state, error="ended by the worker")

    assert q.status(killed).ended_by == "cancel"
    assert q.status(timed).ended_by == "timeout"
    rows = {r.id: r for r in plane.dispatch.invocations(queue="gpu")}
    assert rows[killed].preemptions == 0 and rows[killed].max_preemptions == 20
    assert rows[timed].ended_by == "timeout"


def test_a_failed_end_records_out_of_memory_apart_from_a_death(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    oom, died, gpu = q.submit(1), q.submit(2), q.submit(3)
    for inv, cause in ((oom, "oom"), (died, None), (gpu, "gpu_memory")):
        job = plane.peer.claim("gpu")
        assert job is not None and job.id == inv
        plane.dispatch.end(job.id, job.lease, state="failed", error=f"ended: {cause}", cause=cause)

    assert [(q.status(i).state, q.status(i).ended_by) for i in (oom, died, gpu)] == [
        ("failed", "oom"),
        ("failed", "died"),
        ("failed", "gpu_memory"),
    ]
    assert q.status(oom).error == "ended: oom"


def test_an_end_with_a_cause_its_state_cannot_have_is_refused(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1)
    job = plane.peer.claim("gpu")
    assert job is not None
    for state, cause in (("timeout", "oom"), ("failed", "notice"), ("failed", "whim")):
        with pytest.raises(InvalidArgument, match=f"cannot end an attempt as '{state}' with"):
            plane.dispatch.end(job.id, job.lease, state=state, error="x", cause=cause)
    assert (q.status(inv).state, q.status(inv).ended_by) == ("running", None)


def _stored(plane: PlaneEnv, blob: bytes) -> bool:
    """Whether the object a checkpoint's Ref names is still in its storage (read there, never
    from this box's cache of it)."""
    ref = sniff_ref(blob)
    assert ref is not None
    try:
        if is_plane_url(ref.url):
            tier_for(ref.url, via=plane.dispatch).open(ref.key.rpartition("/")[2]).close()
        else:
            ref.read()
    except (NotFound, FileNotFoundError):
        return False
    return True


def test_a_checkpoint_replaced_by_a_newer_one_is_deleted_from_storage(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1)
    (job,) = claiming.claim_many(plane.dispatch, ["gpu"], worker="w", limit=1)

    # The worker's own path: the object to storage (the plane tier over HTTP, the box's
    # storage on an embedded plane), then its Ref to the row, then the old one deleted.
    first = store_checkpoint(plane.dispatch, None, job, dls.encode({"step": 10}))
    assert _stored(plane, first)
    second = store_checkpoint(plane.dispatch, None, job, dls.encode({"step": 20}))

    assert q.status(inv).checkpoint == second
    assert not _stored(plane, first)
    assert _stored(plane, second)
    sniffed = sniff_ref(second)
    assert sniffed is not None
    assert is_plane_url(sniffed.url) == isinstance(plane.dispatch, dls.HttpDispatch)


def _checkpoint_blob(n: int) -> bytes:
    """An encoded spilled Ref, as a worker writes one to the row (the object is not read)."""
    ref = dls.Ref(id=f"{n:026d}", size=10, digest="0" * 32, storage="file:///nowhere", spilled=True)
    return dls.encode(ref)


def test_a_checkpoint_is_the_last_one_written_under_the_lease(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1)
    (job,) = claiming.claim_many(plane.dispatch, ["gpu"], worker="w", limit=1)
    first, second = _checkpoint_blob(1), _checkpoint_blob(2)

    assert plane.dispatch.checkpoint(job.id, job.lease, first) is None
    assert plane.dispatch.checkpoint(job.id, job.lease, second) == first
    assert q.status(inv).checkpoint == second

    plane.dispatch.release(job.id, job.lease, outcome="preempted")
    (again,) = claiming.claim_many(plane.dispatch, ["gpu"], worker="w", limit=1)
    assert again.checkpoint == second  # the next attempt is handed its state's Ref
    with pytest.raises(LeaseLost, match="the previous checkpoint stays"):
        plane.dispatch.checkpoint(job.id, job.lease, first)  # the old attempt's lease
    assert q.status(inv).checkpoint == second


@pytest.mark.parametrize("bad", [b"", b"\x91\x01", b"x" * 5000])
def test_a_checkpoint_that_is_not_a_ref_is_refused(plane: PlaneEnv, bad: bytes) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1)
    (job,) = claiming.claim_many(plane.dispatch, ["gpu"], worker="w", limit=1)
    plane.dispatch.checkpoint(job.id, job.lease, _checkpoint_blob(1))

    with pytest.raises(InvalidArgument, match="encoded Ref of an object in durable storage"):
        plane.dispatch.checkpoint(job.id, job.lease, bad)

    assert q.status(inv).checkpoint == _checkpoint_blob(1)


def test_a_resume_frame_continues_the_journal_and_streams_pass_over_it(
    plane: PlaneEnv,
) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1)
    (job,) = claiming.claim_many(plane.dispatch, ["gpu"], worker="w", limit=1)
    plane.dispatch.post(job.id, "VALUE", dls.encode("before"), lease=job.lease)
    plane.dispatch.release(job.id, job.lease, outcome="preempted")
    (again,) = claiming.claim_many(plane.dispatch, ["gpu"], worker="w", limit=1)
    plane.dispatch.post(again.id, "RESUME", dls.encode({"attempt": 2}), lease=again.lease)
    plane.dispatch.post(again.id, "VALUE", dls.encode("after"), lease=again.lease)
    plane.dispatch.ack(again.id, again.lease, dls.encode("done"))

    frames = plane.dispatch.frames(inv)
    assert [(f.seq, f.kind) for f in frames] == [(0, "VALUE"), (1, "RESUME"), (2, "VALUE")]
    assert list(q.stream(inv, timeout=5)) == ["before", "after"]


def test_the_cause_is_noted_under_the_lease_before_the_end(plane: PlaneEnv) -> None:
    q = plane.queue("gpu")
    inv = q.submit(1)
    (job,) = claiming.claim_many(plane.dispatch, ["gpu"], worker="w", limit=1)

    assert plane.dispatch.note_cause(job.id, job.lease, "timeout") is True

    row = q.status(inv)
    assert (row.state, row.ended_by) == ("running", "timeout")
    with pytest.raises(InvalidArgument, match="unknown end cause 'whim'"):
        plane.dispatch.note_cause(job.id, job.lease, "whim")
    plane.dispatch.end(job.id, job.lease, state="timeout", error="too slow")
    assert plane.dispatch.note_cause(job.id, job.lease, "notice") is False  # not running
    assert q.status(inv).ended_by == "timeout"


def test_a_jobs_last_checkpoint_goes_with_its_row_at_retention(plane: PlaneEnv) -> None:
    from dreamlake.lakeshore import retention

    q = plane.queue("gpu")
    q.submit(1)
    (job,) = claiming.claim_many(plane.dispatch, ["gpu"], worker="w", limit=1)
    last = store_checkpoint(plane.dispatch, None, job, dls.encode({"step": 30}))
    plane.dispatch.ack(job.id, job.lease, dls.encode("done"))
    assert _stored(plane, last)  # a finished job keeps it until retention

    trimmed = retention.trim(plane.dispatch, invocations_older_than_s=0)

    assert trimmed.problems == [] and trimmed.invocations >= 1
    assert not _stored(plane, last)


@pytest.mark.parametrize("kind", ["fifo", "filo", "boltzmann"])
def test_a_preempted_job_is_taken_next_among_its_priority_on_every_kind(
    plane: PlaneEnv, kind: str
) -> None:
    q = plane.queue("order", kind=kind)
    order: dict[str, Any] = {"kind": kind}
    if kind == "boltzmann":
        order["temperature"] = 0.0  # strict priority: the urgent job is drawn first
    first = q.submit("first")
    job = plane.peer.claim("order", **order)
    assert job is not None and job.id == first
    later = [q.submit(tag) for tag in ("second", "third")]  # filo alone would take these first
    urgent = q.submit("urgent", priority=5)

    plane.peer.call("release", id=job.id, lease=job.lease, outcome="preempted")

    taken = []
    while (claimed := plane.peer.claim("order", **order)) is not None:
        taken.append(claimed.id)
    # Priority still rules: only the urgent job outranks it; then it, before all of its level.
    assert taken[:2] == [urgent, first]
    assert sorted(taken[2:]) == sorted(later)


def test_a_batch_claim_takes_the_preempted_job_first(plane: PlaneEnv) -> None:
    q = plane.queue("order")
    first = q.submit("first")
    (job,) = claiming.claim_many(plane.dispatch, ["order"], worker="w", limit=1)
    q.submit_many(["a", "b", "c"])
    plane.dispatch.release(job.id, job.lease, outcome="preempted")
    batch = claiming.claim_many(plane.dispatch, ["order"], worker="w2", limit=3)

    assert batch[0].id == first and len(batch) == 3
    assert batch[0].attempt == 2 and batch[0].preemptions == 1
