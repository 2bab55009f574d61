"""Resources (issue 34): what a job asks for, the queue's default, claims that fit what a worker
has free, and where an attempt runs: the same on every plane."""

from __future__ import annotations

import math
import secrets
import time
from typing import Any

import pytest
from planes import PlaneEnv, eventually

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import InvalidArgument, LeaseLost
from dreamlake.lakeshore.types import SubmitRequest
from tests.support import claiming

H100 = "NVIDIA H100 80GB HBM3"


def free(**figures: Any) -> dict[str, Any]:
    """What a worker with one free H100 of 80 GB and nothing else running says it has."""
    return {
        "gpus_whole": 1,
        "gpu_share": 1.0,
        "gpu_names": [H100],
        "gpu_memory_gb": 80,
        **figures,
    }


def test_a_request_travels_on_the_row_normalised_and_in_every_read(plane: PlaneEnv) -> None:
    q = plane.queue("res-asked")
    whole = q.submit("a", resources={"gpus": 2.0, "gpu_type": ["H100", "A100"], "cpus": 8})
    shared = q.submit("b", resources={"gpus": 0.25, "gpu_memory_gb": 40, "memory_gb": 64})
    plain = q.submit("c")

    row = q.status(whole)
    assert row.resources == {"gpus": 2, "gpu_type": ["H100", "A100"], "cpus": 8}
    assert isinstance(row.resources["gpus"], int)
    assert q.status(shared).resources == {"gpus": 0.25, "gpu_memory_gb": 40, "memory_gb": 64}
    assert q.status(plain).resources == {}
    listed = {inv.id: inv.resources for inv in plane.dispatch.invocations(queue="res-asked")}
    assert listed[whole] == row.resources and listed[plain] == {}
    # Unplaced; with no daemon on the queue, a sweep that ran since may have said so already.
    assert row.placement is None and row.pending_reason in (None, "waiting_for_capacity")


BAD = [
    ({"gpus": 1.5}, "resources.gpus must be a number >= 0"),
    ({"gpus": -1}, "resources.gpus must be a number >= 0"),
    ({"gpus": math.nan}, "resources.gpus must be a finite number"),
    ({"gpus": math.inf}, "resources.gpus must be a finite number"),
    ({"gpus": True}, "resources.gpus must be a number, got True"),
    ({"gpus": "1"}, "resources.gpus must be a number, got '1'"),
    ({"cpus": -2}, "resources.cpus must be a number from 0"),
    ({"memory_gb": "64GB"}, "resources.memory_gb must be a number"),
    ({"gpu": 1}, "unknown resources key(s) 'gpu'; use gpus, gpu_type"),
    ({"gpu_type": 100}, "resources.gpu_type must be a GPU name or a list"),
    ({"gpu_type": ["H100", "*"]}, "resources.gpu_type names are 1 to 64 letters"),
    ([1], "resources must be an object with keys among gpus"),
]


@pytest.mark.parametrize(("bad", "words"), BAD, ids=[repr(b) for b, _ in BAD])
def test_a_bad_request_is_refused_naming_the_key_and_nothing_is_stored(
    plane: PlaneEnv, bad: Any, words: str
) -> None:
    q = plane.queue("res-bad")
    q.submit("before")
    request = SubmitRequest(dls.encode("x"), resources=bad)

    with pytest.raises(InvalidArgument) as refused:
        plane.dispatch.submit("res-bad", [SubmitRequest(dls.encode("ok")), request])

    assert words in str(refused.value)
    assert q.count("queued") == 1  # the batch's good item went neither


def test_the_queue_default_applies_to_a_job_that_states_none(plane: PlaneEnv) -> None:
    q = plane.queue("res-default", resources={"gpus": 1, "gpu_type": "H100"})
    defaulted = q.submit("a")
    own = q.submit("b", resources={"gpus": 0.5})
    nothing = q.submit("c", resources={})

    assert plane.dispatch.queue("res-default").resources == {"gpus": 1, "gpu_type": "H100"}
    assert q.status(defaulted).resources == {"gpus": 1, "gpu_type": "H100"}
    assert q.status(own).resources == {"gpus": 0.5}
    assert q.status(nothing).resources == {}

    patched = plane.dispatch.patch_queue("res-default", {"resources": {"gpus": 4}})
    assert patched.resources == {"gpus": 4}
    assert q.status(q.submit("d")).resources == {"gpus": 4}
    with pytest.raises(InvalidArgument, match=r"queue resources\.gpus must be a number >= 0"):
        plane.dispatch.patch_queue("res-default", {"resources": {"gpus": 2.5}})
    assert plane.dispatch.queue("res-default").resources == {"gpus": 4}


def test_a_udf_request_beats_the_queues_and_a_call_beats_the_udfs(plane: PlaneEnv) -> None:
    q = plane.queue("res-udf", resources={"gpus": 1})

    @dls.udf(queue=q, resources={"gpus": 2})
    def train(x: int) -> int:
        return x

    assert q.status(train.submit(1)).resources == {"gpus": 2}
    assert q.status(train.submit(1, _resources={"cpus": 4})).resources == {"cpus": 4}
    with pytest.raises(InvalidArgument, match=r"resources\.gpus"):
        dls.udf(queue=q, resources={"gpus": 3.5})


def test_a_claim_with_free_figures_takes_only_what_fits(plane: PlaneEnv) -> None:
    q = plane.queue("res-fit")
    big = q.submit("big", resources={"gpus": 2})
    a100 = q.submit("a100", resources={"gpus": 1, "gpu_type": "A100"})
    hungry = q.submit("hungry", resources={"gpus": 1, "gpu_memory_gb": 141})
    cpus = q.submit("cpus", resources={"cpus": 64})
    half = q.submit("half", resources={"gpus": 0.5, "gpu_type": ["A100", "h100"]})

    got = claiming.claim_many(
        plane.dispatch,
        ["res-fit"],
        worker="w",
        limit=5,
        free=free(gpu_share=0.5, gpus_whole=0, cpus=16),
    )
    assert [c.id for c in got] == [half]
    assert got[0].resources == {"gpus": 0.5, "gpu_type": ["A100", "h100"]}

    # A plain claim (no figures) takes the head as it always did.
    head = claiming.claim(plane.dispatch, ["res-fit"], worker="w")
    assert head is not None and head.id == big
    rest = claiming.claim_many(plane.dispatch, ["res-fit"], worker="w", limit=5, free=free(cpus=64))
    assert [c.id for c in rest] == [cpus]  # one job per fitted claim; the others do not fit
    assert {q.status(i).state for i in (a100, hungry)} == {"queued"}


def test_a_job_that_states_no_gpus_asks_for_the_workers_default(plane: PlaneEnv) -> None:
    q = plane.queue("res-per-job")
    job = q.submit("x")

    assert (
        claiming.claim(plane.dispatch, ["res-per-job"], worker="w", free=free(default_gpus=2))
        is None
    )
    got = claiming.claim(plane.dispatch, ["res-per-job"], worker="w", free=free(default_gpus=1))
    assert got is not None and got.id == job and got.resources == {}


def test_bad_free_figures_are_refused(plane: PlaneEnv) -> None:
    plane.queue("res-free-bad").submit("x")
    with pytest.raises(InvalidArgument, match="unknown free key"):
        claiming.claim(plane.dispatch, ["res-free-bad"], worker="w", free={"gpu": 1})
    with pytest.raises(InvalidArgument, match=r"free\.gpus_whole must be a number"):
        claiming.claim(plane.dispatch, ["res-free-bad"], worker="w", free={"gpus_whole": "8"})
    assert plane.dispatch.count("res-free-bad", "queued") == 1


def test_placement_is_written_under_the_lease_and_read_back(plane: PlaneEnv) -> None:
    q = plane.queue("res-place")
    job = q.submit("x", resources={"gpus": 1})
    got = claiming.claim(plane.dispatch, ["res-place"], worker="w", free=free())
    assert got is not None
    placement = {"worker": "w", "gpus": [{"index": 3, "uuid": "GPU-1234", "name": H100}]}

    plane.dispatch.place(got.id, got.lease, placement)

    assert q.status(job).placement == placement
    with pytest.raises(LeaseLost, match="placement refused"):
        plane.dispatch.place(got.id, "not-the-lease", {"worker": "other"})
    assert q.status(job).placement == placement


def test_a_claim_reserves_for_the_head_and_backfills_only_what_ends_first(
    plane: PlaneEnv,
) -> None:
    q = plane.queue("res-reserve")
    big = q.submit("big", resources={"gpus": 4})
    small = q.submit("small", resources={"gpus": 1})
    quick = q.submit("quick", resources={"gpus": 1}, timeout_s=30)
    box = {"gpus_whole": 4, "gpu_share": 1.0, "gpu_names": [H100], "gpu_memory_gb": 80}
    soon = time.time() + 60  # the running jobs' timeouts free all four GPUs by then
    # Registered first, as a daemon is: a sweep that saw no live worker would name the head
    # `waiting_for_capacity` over its reservation (a reservation whose worker is gone ends so).
    plane.dispatch.register_worker("w", **h200_box("res-reserve", "w", gpus=4))

    held = claiming.claim(
        plane.dispatch,
        ["res-reserve"],
        worker="w",
        free=free(gpus_whole=2, box={**box, "whole_free_at": []}),
    )
    assert held is None  # no running job surely ends: nothing may delay the head
    # the head says it waits for resources, the jobs it holds back name it (issue 34, item 7);
    # a sweep between the submits and the claim named them, so wait for one after the claim.
    held_back = eventually(
        lambda: (r := q.status(small)).pending_reason not in (None, "waiting_for_capacity") and r
    )
    assert held_back.pending_reason == f"reserved_for:{big}"
    assert held_back.unschedulable_reason == (
        f"held back: job {big} at the head of queue res-reserve has a reservation "
        "(it needs 4 GPUs); jobs that would delay it wait"
    )
    assert q.status(big).pending_reason == "resources"
    assert (q.status(big).unschedulable_reason or "").startswith("worker w has reserved for it")
    backfill = claiming.claim(
        plane.dispatch,
        ["res-reserve"],
        worker="w",
        free=free(gpus_whole=2, box={**box, "whole_free_at": [[soon, 4]]}),
    )
    assert backfill is not None and backfill.id == quick  # ends (30 s) before 60 s
    assert q.status(small).state == "queued"
    head = claiming.claim(
        plane.dispatch,
        ["res-reserve"],
        worker="w",
        free=free(gpus_whole=4, box={**box, "whole_free_at": []}),
    )
    assert head is not None and head.id == big
    assert eventually(lambda: q.status(small).pending_reason is None)  # the reservation is over


def test_the_claim_that_reserves_names_what_it_holds_back_without_the_sweep(
    plane: PlaneEnv,
) -> None:
    """Issue 45 item 3: the reservation is said in the claim's own transaction, so whoever
    reads the head marked `resources` reads the jobs it holds back named `reserved_for`, at the
    default sweep of 5 s as at the suite's 0.25 s (no poll here: the reads follow the claim)."""
    q = plane.queue("res-at-once")
    plane.dispatch.register_worker("w", **h200_box("res-at-once", "w", gpus=4))
    big = q.submit("big", resources={"gpus": 4})
    small = q.submit("small", resources={"gpus": 1})
    box = {"gpus_whole": 4, "gpu_share": 1.0, "gpu_names": [H100], "gpu_memory_gb": 80}
    reserving = free(gpus_whole=1, box={**box, "whole_free_at": []})

    assert claiming.claim(plane.dispatch, ["res-at-once"], worker="w", free=reserving) is None
    assert q.status(big).pending_reason == "resources"
    assert q.status(small).pending_reason == f"reserved_for:{big}"
    later = q.submit("later", resources={"gpus": 1})  # submitted while the reservation holds
    assert claiming.claim(plane.dispatch, ["res-at-once"], worker="w", free=reserving) is None
    assert q.status(later).pending_reason == f"reserved_for:{big}"
    assert (q.status(later).unschedulable_reason or "").startswith(f"held back: job {big}")

    whole = free(gpus_whole=4, box={**box, "whole_free_at": []})
    head = claiming.claim(plane.dispatch, ["res-at-once"], worker="w", free=whole)
    assert head is not None and head.id == big
    # a sweep that read the reservation before this claim may name them once more: poll
    assert eventually(lambda: q.status(small).pending_reason is None)
    assert q.status(later).pending_reason is None


def h200_box(queue: str, name: str, gpus: int = 1) -> dict[str, Any]:
    """A daemon's worker row as `lakeshore-daemon --gpus N --gpu-type 'NVIDIA H200'` writes it."""
    return {
        "queues": [queue],
        "info": {
            "gpus": [
                {"index": i, "uuid": f"u{i}", "name": "NVIDIA H200", "memory_mb": 143771}
                for i in range(gpus)
            ],
            "gpus_per_job": 0,
            "resources": {"gpus": gpus, "cpus": None, "memory_gb": None},
        },
    }


def test_a_job_no_live_daemon_could_run_is_named_until_one_could(plane: PlaneEnv) -> None:
    queue = "res-unsched"
    q = plane.queue(queue)
    plane.dispatch.register_worker("small-box", **h200_box(queue, "small-box"))
    stuck = q.submit("x", resources={"gpus": 2, "gpu_type": "H100"})
    fine = q.submit("y", resources={"gpus": 1})

    row = eventually(lambda: (r := q.status(stuck)).pending_reason == "unschedulable" and r)
    assert row.unschedulable_reason == (
        "needs 2 GPUs of type H100; the daemons on queue res-unsched have at most "
        "1 x NVIDIA H200 (140 GB)"
    )
    assert q.status(fine).pending_reason is None
    assert plane.dispatch.stats(queue)["unschedulable"] == 1

    plane.dispatch.register_worker("big-box", **h200_box(queue, "big-box", gpus=8))
    plane.dispatch.patch_queue(queue, {"admission": {"unschedulable_fail_after_s": 0.1}})
    assert eventually(lambda: q.status(stuck).pending_reason == "unschedulable")  # still H100
    failed = eventually(lambda: (r := q.status(stuck)).state == "failed" and r)
    assert failed.error is not None and failed.error.startswith("needs 2 GPUs of type H100")

    h200 = q.submit("z", resources={"gpus": 4, "gpu_type": "H200"})
    assert q.status(h200).pending_reason is None  # big-box could run it


def test_gpus_a_daemon_reported_failed_are_not_counted_as_what_it_has(plane: PlaneEnv) -> None:
    queue = "res-failed"
    q = plane.queue(queue)
    box = plane.dispatch.register_worker("two-box", **h200_box(queue, "two-box", gpus=2))
    failed = [{"index": 1, "uuid": "u1", "name": "NVIDIA H200", "reason": "Xid 79"}]
    plane.dispatch.heartbeat(box.id, {"busy": 0, "gpus_failed": failed})
    two = q.submit("x", resources={"gpus": 2})

    row = eventually(lambda: (r := q.status(two)).pending_reason == "unschedulable" and r)
    assert row.unschedulable_reason == (
        "needs 2 GPUs; the daemons on queue res-failed have at most 1 x NVIDIA H200 (140 GB)"
    )


def test_a_job_a_provider_shape_could_run_waits_for_that_launch(plane: PlaneEnv) -> None:
    """Issue 34, items 5 and 7: with no daemon up, a request the queue's provider shape could
    run is `waiting_for_capacity` naming the shape; one it could not is `unschedulable`."""
    queue = f"res-shape-{secrets.token_hex(3)}"  # provider names are the namespace's
    provider = f"{queue}-gpu8"
    plane.dispatch.add_provider(
        provider, "local", {"shape": {"gpus": 8, "gpu_type": "H100", "gpu_memory_gb": 80}}
    )
    plane.dispatch.create_queue(
        queue, elasticity={"kind": "fully_elastic", "max": 2, "provider": provider}
    )
    q = plane.queue(queue)
    fits = q.submit("x", resources={"gpus": 4})
    huge = q.submit("y", resources={"gpus": 16})
    typed = q.submit("z", resources={"gpus": 1, "gpu_type": ["A100", "H100"]})

    row = eventually(lambda: (r := q.status(huge)).pending_reason == "unschedulable" and r)
    assert row.unschedulable_reason == (
        f"needs 16 GPUs; no live daemon serves queue {queue} and provider {provider} launches "
        "daemons with 8 x H100 (80 GB)"
    )
    for inv in (fits, typed):
        waiting = q.status(inv)
        assert waiting.pending_reason == "waiting_for_capacity"
        assert waiting.unschedulable_reason is not None
        assert waiting.unschedulable_reason.endswith(
            f"provider {provider} will launch a daemon with 8 x H100 (80 GB)"
        )
    stats = plane.dispatch.stats(queue)
    assert (stats["unschedulable"], stats["waiting_for_capacity"]) == (1, 2)
