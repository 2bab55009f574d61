"""A producer's own ids: a submit sent again after its answer was lost makes no second job.

Over HTTP the SDK mints every job's id and sends a submit again while the plane is unreachable
(tests/faults/test_submit_retry.py loses the answer for real); here, on every plane, the rule
the store keeps: the same ids on the same queue name the jobs already made, admitted once.
"""

from __future__ import annotations

import time

import pytest
from planes import PlaneEnv
from ulid import ULID

from dreamlake.lakeshore import codec
from dreamlake.lakeshore.errors import Conflict, InvalidArgument
from dreamlake.lakeshore.types import SubmitRequest


def fresh_id() -> str:
    return str(ULID())


def request(inv_id: str | None, value: object = 1) -> SubmitRequest:
    return SubmitRequest(payload=codec.encode(value), id=inv_id)


def test_the_same_submit_again_names_the_same_jobs(plane: PlaneEnv) -> None:
    ids = [fresh_id(), fresh_id()]

    first = plane.dispatch.submit("cid", [request(ids[0], "a"), request(ids[1], "b")])
    again = plane.dispatch.submit("cid", [request(ids[0], "a"), request(ids[1], "b")])

    assert first == again == ids
    assert plane.queue("cid").count("queued") == 2


def test_a_repeat_is_not_admitted_twice(plane: PlaneEnv) -> None:
    plane.dispatch.create_queue("cid-full", admission={"max_depth": 1})
    q = plane.queue("cid-full")
    inv_id = fresh_id()
    plane.dispatch.submit("cid-full", [request(inv_id)])

    assert plane.dispatch.submit("cid-full", [request(inv_id)]) == [inv_id]
    assert q.count("queued") == 1


def test_a_repeat_names_its_jobs_on_a_queue_closed_since(plane: PlaneEnv) -> None:
    inv_id = fresh_id()
    plane.dispatch.submit("cid-closing", [request(inv_id)])
    plane.dispatch.set_queue_state("cid-closing", "drain")

    # Accepted before the queue closed: the repeat finds the job, not the closed queue.
    assert plane.dispatch.submit("cid-closing", [request(inv_id)]) == [inv_id]
    with pytest.raises(Conflict, match="draining"):
        plane.dispatch.submit("cid-closing", [request(fresh_id())])


def test_ids_of_another_submit_are_refused(plane: PlaneEnv) -> None:
    taken = fresh_id()
    plane.dispatch.submit("cid", [request(taken)])

    with pytest.raises(Conflict, match="ids are taken"):
        plane.dispatch.submit("cid-other", [request(taken)])  # another queue
    with pytest.raises(Conflict, match="ids are taken"):
        plane.dispatch.submit("cid", [request(taken), request(fresh_id())])  # not the same batch
    assert plane.queue("cid").count("queued") == 1
    assert plane.queue("cid-other").count("queued") == 0


@pytest.mark.parametrize(
    "bad",
    [
        "not-a-ulid",
        "01j5" + "0" * 22,  # lower case
        str(ULID.from_timestamp(time.time() - 3600)),  # an hour old: it would jump the line
        str(ULID.from_timestamp(time.time() + 3600)),
    ],
    ids=["garbage", "lower-case", "stale", "future"],
)
def test_an_id_that_is_not_a_fresh_ulid_is_refused(plane: PlaneEnv, bad: str) -> None:
    with pytest.raises(InvalidArgument, match="id"):
        plane.dispatch.submit("cid", [request(bad)])
    assert plane.queue("cid").count("queued") == 0
