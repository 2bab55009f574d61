"""Admission on every plane: max_depth (reject | block), rate_limit, deadline_cutoff_s, keys.

The rules live in `plane/admission.py` and run inside the submit's own transaction, so each
plane (embedded, two processes on one file, Postgres, HTTP, two HTTP replicas) must enforce the
same numbers; over HTTP a refusal is 429 with Retry-After and comes back as `QueueFullError`.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from planes import PlaneEnv

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.cli.main import cli
from dreamlake.lakeshore.errors import DispatchError, QueueFullError

# -- max_depth --------------------------------------------------------------------------------


def test_max_depth_rejects_the_submit_past_the_limit(plane: PlaneEnv) -> None:
    plane.dispatch.create_queue("capped", admission={"max_depth": 2})
    q = plane.queue("capped")
    q.submit(1)
    q.submit(2)

    with pytest.raises(QueueFullError, match="full") as refused:
        q.submit(3)

    assert refused.value.block is False
    assert refused.value.retry_after_s is not None and refused.value.retry_after_s > 0
    assert q.count("queued") == 2


def test_max_depth_counts_queued_jobs_only(plane: PlaneEnv) -> None:
    """A claimed job leaves the backlog: the room it frees takes the next submit."""
    plane.dispatch.create_queue("capped", admission={"max_depth": 1})
    q = plane.queue("capped")
    q.submit("first")
    with pytest.raises(QueueFullError):
        q.submit("second")

    job = plane.peer.claim("capped")
    assert job is not None

    q.submit("second")
    assert (q.count("queued"), q.count("running")) == (1, 1)


def test_a_batch_that_does_not_fit_is_refused_whole(plane: PlaneEnv) -> None:
    plane.dispatch.create_queue("capped", admission={"max_depth": 3})
    q = plane.queue("capped")
    q.submit(0)

    with pytest.raises(QueueFullError, match="3 more asked"):
        q.submit_many([1, 2, 3])

    assert q.count("queued") == 1


def test_over_http_a_full_queue_answers_429_with_retry_after(plane: PlaneEnv) -> None:
    spec = plane.peer_spec
    if spec is None or spec["kind"] != "http":
        pytest.skip("an HTTP status is only seen on the HTTP planes")
    plane.dispatch.create_queue("capped", admission={"max_depth": 1})
    plane.queue("capped").submit(1)

    response = httpx.post(
        f"{spec['url']}/v1/namespaces/{spec['namespace']}/queues/capped/invocations",
        json={"json": 2},
        headers={"authorization": f"Bearer {spec['token']}", "accept": "application/json"},
        timeout=10.0,
    )

    assert response.status_code == 429
    assert int(response.headers["retry-after"]) >= 1
    error = response.json()["error"]
    assert error["code"] == "queue_full" and error["block"] is False


# -- on_full: block ---------------------------------------------------------------------------


def test_block_waits_for_room_and_a_claim_releases_it(plane: PlaneEnv) -> None:
    plane.dispatch.create_queue("narrow", admission={"max_depth": 1, "on_full": "block"})
    q = plane.queue("narrow")
    first = q.submit("first")
    outcome: dict[str, Any] = {}

    def submit_second() -> None:
        try:
            outcome["id"] = q.submit("second", block_s=30.0)
        except BaseException as exc:
            outcome["error"] = exc

    waiter = threading.Thread(target=submit_second)
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive(), f"the submit did not block: {outcome}"
    assert q.count("queued") == 1

    job = plane.peer.claim("narrow")
    waiter.join(20.0)

    assert not waiter.is_alive() and "error" not in outcome, outcome
    assert job is not None and job.id == first
    assert plane.dispatch.invocation(outcome["id"]).state == "queued"


def test_block_gives_up_after_block_s(plane: PlaneEnv) -> None:
    plane.dispatch.create_queue("narrow", admission={"max_depth": 1, "on_full": "block"})
    q = plane.queue("narrow")
    q.submit("first")
    started = time.monotonic()

    with pytest.raises(QueueFullError) as refused:
        q.submit("second", block_s=0.3)

    assert refused.value.block is True
    assert time.monotonic() - started >= 0.25
    assert q.count("queued") == 1


# -- rate_limit -------------------------------------------------------------------------------


def test_rate_limit_refuses_a_burst_past_the_bucket(plane: PlaneEnv) -> None:
    """rate_limit 2/s: a bucket of 2 tokens, so a quick third submit is refused."""
    plane.dispatch.create_queue("paced", admission={"rate_limit": 2})
    q = plane.queue("paced")
    q.submit(1)
    q.submit(2)

    with pytest.raises(QueueFullError, match="rate_limit") as refused:
        q.submit(3)

    assert refused.value.retry_after_s is not None and 0 < refused.value.retry_after_s <= 0.5
    assert q.count("queued") == 2


def test_rate_limit_with_block_waits_for_a_token(plane: PlaneEnv) -> None:
    plane.dispatch.create_queue("paced", admission={"rate_limit": 4, "on_full": "block"})
    q = plane.queue("paced")
    started = time.monotonic()

    ids = [q.submit(i, block_s=10.0) for i in range(6)]  # 4 at once, then one per 0.25 s

    assert len(set(ids)) == 6
    assert time.monotonic() - started >= 0.3  # the last two waited for tokens
    assert q.count("queued") == 6


# -- deadline_cutoff_s ------------------------------------------------------------------------


def test_a_job_not_started_within_the_cutoff_ends_timeout_unrun(plane: PlaneEnv) -> None:
    cutoff_s = 0.5
    plane.dispatch.create_queue("fresh", admission={"deadline_cutoff_s": cutoff_s})
    q = plane.queue("fresh")
    inv = q.submit({"op": "double", "x": 1})
    missed = time.monotonic() + cutoff_s + 0.05

    time.sleep(max(0.0, missed - time.monotonic()))  # the clock under test, not a sync
    job = plane.peer.claim("fresh")

    assert job is None  # expired jobs are never handed out
    row = plane.dispatch.invocation(inv)
    assert row.state == "timeout" and row.attempt == 0 and row.started_at is None
    assert "deadline_cutoff_s" in (row.error or "")
    with pytest.raises(DispatchError, match="timeout"):
        q.result(inv, timeout=1.0)


def test_the_deadline_holds_with_no_worker_present(plane: PlaneEnv) -> None:
    # Given a job nobody will ever claim
    plane.dispatch.create_queue("unwatched", admission={"deadline_cutoff_s": 0.3})
    q = plane.queue("unwatched")
    inv = q.submit({"op": "double", "x": 1})

    # then it ends `timeout` by itself, as every reader sees, on every plane
    with pytest.raises(DispatchError, match="timeout"):
        q.result(inv, timeout=10.0)
    assert plane.dispatch.invocation(inv).state == "timeout"
    assert (q.count("queued"), q.count("timeout")) == (0, 1)


def test_a_job_started_within_the_cutoff_runs(plane: PlaneEnv) -> None:
    plane.dispatch.create_queue("fresh", admission={"deadline_cutoff_s": 30})
    inv = plane.queue("fresh").submit({"op": "double", "x": 21})

    assert plane.peer.call("run_worker", queue="fresh", once=True) == 1

    assert plane.queue("fresh").result(inv, timeout=10.0) == 42


# -- idempotent keys --------------------------------------------------------------------------


def test_keyed_resubmits_do_not_count_against_max_depth(plane: PlaneEnv) -> None:
    plane.dispatch.create_queue("capped", admission={"max_depth": 1})
    q = plane.queue("capped")
    first = q.submit({"i": 0}, key="nightly")

    again = [q.submit({"i": n}, key="nightly") for n in range(3)]

    assert again == [first] * 3
    with pytest.raises(QueueFullError):
        q.submit({"i": 9}, key="another")
    assert q.count("queued") == 1


def test_keyed_resubmits_take_no_rate_tokens(plane: PlaneEnv) -> None:
    plane.dispatch.create_queue("paced", admission={"rate_limit": 1})
    q = plane.queue("paced")
    first = q.submit(0, key="k")

    assert [q.submit(n, key="k") for n in range(5)] == [first] * 5
    assert q.count("queued") == 1


# -- changing the rules -----------------------------------------------------------------------


def test_a_patched_admission_applies_to_the_next_submit(plane: PlaneEnv) -> None:
    q = plane.queue("grows")
    q.submit(1)
    q.submit(2)

    plane.dispatch.patch_queue("grows", {"admission": {"max_depth": 2, "on_full": "reject"}})

    with pytest.raises(QueueFullError):
        q.submit(3)
    plane.dispatch.patch_queue("grows", {"admission": {"max_depth": 1000}})
    q.submit(3)
    assert q.count("queued") == 3


def test_the_cli_patches_admission(plane: PlaneEnv) -> None:
    """`lakeshore queues patch Q --max-depth 1000 --on-full reject` against a control plane."""
    spec = plane.peer_spec
    if spec is None or spec["kind"] != "http":
        pytest.skip("the CLI reaches a plane by URL (or this box's embedded file)")
    plane.dispatch.create_queue("training-h100")
    where = ["--url", spec["url"], "--token", spec["token"], "--namespace", spec["namespace"]]

    args = ["queues", "patch", "training-h100", "--max-depth", "1000", "--on-full", "reject"]

    result = CliRunner().invoke(cli, [*args, "--json", *where])

    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["admission"] == {"max_depth": 1000, "on_full": "reject"}
    assert plane.dispatch.queue("training-h100").admission == {
        "max_depth": 1000,
        "on_full": "reject",
    }


def test_a_submit_through_the_sdk_queue_object_sees_the_same_error(plane: PlaneEnv) -> None:
    plane.dispatch.create_queue("capped", admission={"max_depth": 1})
    plane.peer.call("submit", queue="capped", payload=1)

    with pytest.raises(QueueFullError):
        plane.peer.call("submit", queue="capped", payload=2)
    with pytest.raises(QueueFullError):
        dls.SyncQueue("capped", dispatch=plane.dispatch).submit(3)
