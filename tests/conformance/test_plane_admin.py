"""Queue administration (create, ls, show, patch, archive, drain, rm) and worker rows."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable

import pytest
from planes import PlaneEnv

from dreamlake.lakeshore.errors import Conflict, InvalidArgument, NotFound
from dreamlake.lakeshore.plane.base import Plane
from dreamlake.lakeshore.types import DEFAULT_QUEUE_DESCRIPTION

# -- namespaces -------------------------------------------------------------------------------

#: Reads on a namespace: none of them may create it (issue 33, item 7a).
NAMESPACE_READS: dict[str, Callable[[Plane], object]] = {
    "queues": lambda p: p.queues(),
    "queue default": lambda p: p.queue("default"),
    "count": lambda p: p.count("default"),
    "stats": lambda p: p.stats("default"),
    "events": lambda p: p.events("default"),
    "invocations": lambda p: p.invocations(),
    "workers": lambda p: p.workers(),
    "topic frames": lambda p: p.frames(p.topic_channel("default", "news")),
}


def test_a_read_of_an_unknown_namespace_is_not_found_and_creates_nothing(
    plane: PlaneEnv,
) -> None:
    ns = f"typo-{os.getpid()}-{uuid.uuid4().hex[:8]}"

    with plane.in_namespace(ns) as typo:
        for what, read in NAMESPACE_READS.items():
            with pytest.raises(NotFound, match=f"unknown namespace '{ns}'"):
                read(typo)
                pytest.fail(f"{what} in an unknown namespace answered")

    assert plane.on_store(lambda store: store.namespace(ns)) is None
    assert ns not in {q.namespace for q in plane.dispatch.queues()}


# -- queues -----------------------------------------------------------------------------------


def test_the_default_queue_materialises_on_first_listing(plane: PlaneEnv) -> None:
    names = [q.name for q in plane.dispatch.queues()]

    assert "default" in names
    default = plane.dispatch.queue("default")
    assert default.kind == "fifo" and default.state == "active"
    assert default.description == DEFAULT_QUEUE_DESCRIPTION


def test_create_then_show_a_queue(plane: PlaneEnv) -> None:
    created = plane.dispatch.create_queue(
        "train", kind="boltzmann", description="big jobs", admission={"max_depth": 10}
    )

    shown = plane.dispatch.queue("train")
    assert created == shown
    assert (shown.kind, shown.state, shown.description) == ("boltzmann", "active", "big jobs")
    assert shown.admission == {"max_depth": 10}
    assert shown.elasticity == {"kind": "none"}
    assert "train" in [q.name for q in plane.dispatch.queues()]


def test_create_keeps_the_priority_alias_as_given(plane: PlaneEnv) -> None:
    assert plane.dispatch.create_queue("ranked", kind="priority").kind == "priority"


def test_create_refuses_a_duplicate_a_bad_name_and_a_bad_kind(plane: PlaneEnv) -> None:
    plane.dispatch.create_queue("train")

    with pytest.raises(Conflict, match="already exists"):
        plane.dispatch.create_queue("train")
    with pytest.raises(InvalidArgument, match="name"):
        plane.dispatch.create_queue("Train")
    with pytest.raises(InvalidArgument, match="unknown queue kind 'lifo'"):
        plane.dispatch.create_queue("other", kind="lifo")
    assert [q.name for q in plane.dispatch.queues()].count("train") == 1


def test_a_submit_creates_its_queue(plane: PlaneEnv) -> None:
    plane.queue("fresh").submit(1)

    assert plane.dispatch.queue("fresh").kind == "fifo"


def test_show_an_unknown_queue_is_not_found(plane: PlaneEnv) -> None:
    with pytest.raises(NotFound):
        plane.dispatch.queue("nope")


def test_patch_changes_description_admission_and_elasticity(plane: PlaneEnv) -> None:
    plane.dispatch.create_queue("train")

    patched = plane.dispatch.patch_queue(
        "train",
        {
            "description": "nightly",
            "admission": {"max_depth": 5},
            "elasticity": {"min": 0, "max": 4},
        },
    )

    assert patched.description == "nightly"
    assert patched.admission == {"max_depth": 5}
    assert patched.elasticity == {"kind": "none", "min": 0, "max": 4}
    assert plane.dispatch.queue("train") == patched
    assert plane.dispatch.events("train")[0]["kind"] == "patched"


def test_patch_refuses_kind_changes_and_unknown_fields(plane: PlaneEnv) -> None:
    before = plane.dispatch.create_queue("train")

    with pytest.raises(InvalidArgument, match="kind"):
        plane.dispatch.patch_queue("train", {"kind": "filo"})
    with pytest.raises(InvalidArgument, match="patchable"):
        plane.dispatch.patch_queue("train", {"colour": "blue"})
    with pytest.raises(InvalidArgument, match="max_depth"):
        plane.dispatch.patch_queue("train", {"admission": {"max_depth": -1}})
    with pytest.raises(NotFound):
        plane.dispatch.patch_queue("nope", {"description": "x"})

    assert plane.dispatch.queue("train") == before


def test_admission_max_depth_rejects_the_submit_past_it(plane: PlaneEnv) -> None:
    from dreamlake.lakeshore.errors import QueueFullError

    plane.dispatch.create_queue("small", admission={"max_depth": 2})
    q = plane.queue("small")
    q.submit(1)
    q.submit(2)

    with pytest.raises(QueueFullError):
        q.submit(3)
    assert q.count() == 2


def test_draining_rejects_submits_but_finishes_the_backlog(plane: PlaneEnv) -> None:
    q = plane.queue("train")
    inv = q.submit(1)

    assert plane.dispatch.set_queue_state("train", "drain").state == "draining"

    with pytest.raises(Conflict, match="draining"):
        q.submit(2)
    job = plane.peer.claim("train")
    assert job is not None and job.id == inv
    plane.peer.ack(job, "done")
    assert q.result(inv, timeout=1) == "done"


def test_archived_rejects_submits_and_claims_until_unarchived(plane: PlaneEnv) -> None:
    q = plane.queue("train")
    inv = q.submit(1)

    plane.dispatch.set_queue_state("train", "archive")

    with pytest.raises(Conflict, match="archived"):
        q.submit(2)
    assert plane.peer.claim("train") is None
    assert plane.peer.claim("train", kind="boltzmann") is None
    assert q.count() == 1
    assert [x.name for x in plane.dispatch.queues(state="archived")] == ["train"]

    plane.dispatch.set_queue_state("train", "unarchive")

    job = plane.peer.claim("train")
    assert job is not None and job.id == inv


def test_queue_events_record_each_change_newest_first(plane: PlaneEnv) -> None:
    plane.dispatch.create_queue("train")
    plane.dispatch.set_queue_state("train", "drain")
    plane.dispatch.set_queue_state("train", "archive")

    kinds = [e["kind"] for e in plane.dispatch.events("train")]

    assert kinds == ["archived", "drained", "created"]
    assert plane.dispatch.events("train", limit=1)[0]["detail"] == {"from": "draining"}
    with pytest.raises(InvalidArgument):
        plane.dispatch.events("train", limit=0)


def test_unknown_queue_action_and_state_filter_are_refused(plane: PlaneEnv) -> None:
    plane.dispatch.create_queue("train")

    with pytest.raises(InvalidArgument, match="queue action"):
        plane.dispatch.set_queue_state("train", "pause")
    with pytest.raises(InvalidArgument, match="queue state"):
        plane.dispatch.queues(state="paused")
    with pytest.raises(NotFound):
        plane.dispatch.set_queue_state("nope", "drain")


def test_the_default_queue_cannot_be_archived_or_deleted(plane: PlaneEnv) -> None:
    with pytest.raises(Conflict) as archive:
        plane.dispatch.set_queue_state("default", "archive")
    with pytest.raises(Conflict) as rm:
        plane.dispatch.delete_queue("default", force=True)

    assert archive.value.status == rm.value.status == 409
    assert plane.dispatch.queue("default").state == "active"


def test_rm_deletes_the_queue_and_cancels_its_backlog(plane: PlaneEnv) -> None:
    q = plane.queue("scratch")
    inv = q.submit(1)

    plane.dispatch.delete_queue("scratch")

    assert "scratch" not in [x.name for x in plane.dispatch.queues()]
    assert q.status(inv).state == "cancelled"
    with pytest.raises(NotFound):
        plane.dispatch.delete_queue("scratch")


def test_rm_refuses_while_workers_are_members_unless_forced(plane: PlaneEnv) -> None:
    plane.dispatch.create_queue("train")
    w = plane.dispatch.register_worker("box-1", queues=["train", "eval"])

    with pytest.raises(Conflict, match="member") as err:
        plane.dispatch.delete_queue("train")
    assert err.value.status == 409
    assert plane.dispatch.queue("train").state == "active"

    plane.dispatch.delete_queue("train", force=True)

    assert plane.dispatch.worker(w.id).queues == ["eval"]
    with pytest.raises(NotFound):
        plane.dispatch.queue("train")


def test_stats_count_members_slots_and_backlog(plane: PlaneEnv) -> None:
    q = plane.queue("train")
    q.submit(1)
    q.submit(2)
    assert plane.peer.claim("train") is not None
    plane.dispatch.register_worker("box-1", queues=["train"], info={"concurrency": 4})
    plane.dispatch.register_worker("box-2", queues=["eval"])

    stats = plane.dispatch.stats("train")

    assert stats["daemon_count"] == 1 and stats["slots"] == 4
    assert stats["running"] == 1 and stats["pending"] == 1
    assert stats["utilization"] == 0.25


# -- workers ----------------------------------------------------------------------------------


def test_register_worker_then_find_it_by_id_and_by_name(plane: PlaneEnv) -> None:
    w = plane.dispatch.register_worker(
        "box-1", queues=["train"], host="gpu01", pid=os.getpid(), info={"gpus": 8}
    )

    assert plane.dispatch.worker(w.id) == w == plane.dispatch.worker("box-1")
    assert (w.name, w.queues, w.host, w.info, w.state) == (
        "box-1",
        ["train"],
        "gpu01",
        {"gpus": 8},
        "alive",
    )
    assert [x.id for x in plane.dispatch.workers()] == [w.id]


def test_registering_a_name_again_retires_the_older_row(plane: PlaneEnv) -> None:
    old = plane.dispatch.register_worker("box-1")
    new = plane.dispatch.register_worker("box-1")

    assert plane.dispatch.worker("box-1").id == new.id
    assert plane.dispatch.worker(old.id).state == "gone"
    assert [w.id for w in plane.dispatch.workers()] == [new.id]


def test_heartbeat_records_load(plane: PlaneEnv) -> None:
    w = plane.dispatch.register_worker("box-1")

    beat = plane.dispatch.heartbeat(w.id, {"cpu": 0.5}, state="draining")

    assert beat.load == {"cpu": 0.5} and beat.state == "draining"
    assert beat.heartbeat_at >= w.heartbeat_at
    with pytest.raises(NotFound):
        plane.dispatch.heartbeat("01J00000000000000000000000", {})


def test_membership_add_and_remove_queues(plane: PlaneEnv) -> None:
    w = plane.dispatch.register_worker("box-1", queues=["train"])

    w = plane.dispatch.update_worker_queues("box-1", add=["eval", "train"], remove=[])
    assert w.queues == ["train", "eval"]
    w = plane.dispatch.update_worker_queues(w.id, remove=["train"])
    assert w.queues == ["eval"]

    with pytest.raises(InvalidArgument, match="default"):
        plane.dispatch.update_worker_queues(w.id, add=["default"])
    with pytest.raises(InvalidArgument, match="name"):
        plane.dispatch.update_worker_queues(w.id, add=["Bad Name"])
    assert plane.dispatch.worker(w.id).queues == ["eval"]


def test_a_worker_with_no_queues_is_a_member_of_default(plane: PlaneEnv) -> None:
    plane.dispatch.register_worker("box-1")

    assert plane.dispatch.stats("default")["daemon_count"] == 1
    assert plane.dispatch.stats("default")["slots"] == 1


def test_set_worker_state(plane: PlaneEnv) -> None:
    w = plane.dispatch.register_worker("box-1")

    assert plane.dispatch.set_worker_state(w.id, "draining").state == "draining"
    with pytest.raises(InvalidArgument, match="worker state"):
        plane.dispatch.set_worker_state(w.id, "sleeping")
    plane.dispatch.set_worker_state(w.id, "gone")
    assert plane.dispatch.workers() == []


def test_unknown_workers_are_not_found(plane: PlaneEnv) -> None:
    with pytest.raises(NotFound):
        plane.dispatch.worker("ghost")
    with pytest.raises(NotFound):
        plane.dispatch.update_worker_queues("ghost", add=["train"])
    with pytest.raises(NotFound):
        plane.dispatch.set_worker_state("ghost", "gone")


def test_bad_worker_names_are_refused(plane: PlaneEnv) -> None:
    with pytest.raises(InvalidArgument, match="worker name"):
        plane.dispatch.register_worker("Box One")
    with pytest.raises(InvalidArgument, match="name"):
        plane.dispatch.register_worker("box-1", queues=["Bad"])
    assert plane.dispatch.workers() == []
