"""`/metrics`, `/healthz`, `/readyz` on a real server, checked against known traffic.

Counters are per server process and labelled by namespace, so a fresh namespace on the shared
session server gives exact figures however many other tests ran before. Gauges and the
controller-decision counter are read from the store at scrape time, so a queue event written
straight into the store (as the controller does) shows up without any route seeing it.
"""

from __future__ import annotations

import threading
import time

import httpx
import jobs
import pytest
from daemon_harness import DaemonProcess, wait_until
from prometheus_client.parser import text_string_to_metric_families

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane import HttpDispatch
from dreamlake.lakeshore.plane.dispatch import open_store
from dreamlake.lakeshore.types import Ack, SubmitRequest
from tests.support import claiming

WAIT_S = 10.0
#: Jobs the daemon test runs: enough that most settle on the daemon's next claim.
JOBS = 8


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = httpx.get(f"{url}/metrics", timeout=10.0)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def completed(url: str, labels: dict[str, str], at_least: int = 1) -> dict | None:
    """The scrape once it counts `at_least` succeeded completions for `labels`, else None."""
    samples = scrape(url)
    done = value(samples, "lakeshore_completions_total", **labels, state="succeeded")
    return samples if done >= at_least else None


def test_metrics_count_known_traffic(server, tenant):
    ns = tenant.namespace
    plane = HttpDispatch(server.url, token=tenant.token, namespace=ns)
    try:
        ids = plane.submit("work", [SubmitRequest(payload=b"\x90") for _ in range(4)])
        plane.submit("other", [SubmitRequest(payload=b"\x90")])
        assert plane.cancel(ids[3]) is True  # queued -> cancelled
        claims = [claiming.claim(plane, ["work"], worker="w", wait_s=WAIT_S) for _ in range(3)]
        assert all(c is not None for c in claims)
        a, b, c = claims
        plane.ack(a.id, a.lease, None)
        assert plane.nack(b.id, b.lease, error="boom", retry=False) == "failed"
        assert plane.nack(c.id, c.lease, error="flaky", retry=True) == "queued"
        plane.register_worker("metrics-w", queues=["work"])
        d = claiming.claim(plane, ["other"], worker="w", wait_s=WAIT_S)
        assert d is not None
        plane.end(d.id, d.lease, state="timeout", error="too slow")
        plane.retry(d.id)
    finally:
        plane.close()
    store = open_store(server.store_path)
    try:
        store.record_event(ns, "work", "scaled_up", {"from": 0, "to": 2, "reason": "backlog 3"})
    finally:
        store.close()

    m = scrape(server.url)
    work = {"namespace": ns, "queue": "work"}
    other = {"namespace": ns, "queue": "other"}
    assert value(m, "lakeshore_submits_total", **work) == 4
    assert value(m, "lakeshore_submits_total", **other) == 1
    assert value(m, "lakeshore_claims_total", **work) == 3
    assert value(m, "lakeshore_completions_total", **work, state="succeeded") == 1
    assert value(m, "lakeshore_completions_total", **work, state="failed") == 1
    assert value(m, "lakeshore_completions_total", **work, state="cancelled") == 1
    assert value(m, "lakeshore_completions_total", **other, state="timeout") == 1
    assert value(m, "lakeshore_retries_total", **work, reason="nack") == 1
    assert value(m, "lakeshore_retries_total", **other, reason="operator") == 1
    # histograms: every first-attempt claim, every terminal settle
    assert value(m, "lakeshore_submit_to_start_seconds_count", **work) == 3
    assert value(m, "lakeshore_end_to_end_seconds_count", **work) == 3  # ack, nack, cancel
    assert value(m, "lakeshore_end_to_end_seconds_bucket", **work, le="+Inf") == 3
    # store gauges at scrape time
    assert value(m, "lakeshore_invocations", **work, state="queued") == 1  # the retried nack
    assert value(m, "lakeshore_invocations", **work, state="succeeded") == 1
    assert value(m, "lakeshore_invocations", **work, state="cancelled") == 1
    assert value(m, "lakeshore_invocations", **other, state="queued") == 1  # operator retry
    assert value(m, "lakeshore_workers", namespace=ns, state="alive") == 1
    assert value(m, "lakeshore_controller_decisions_total", **work, decision="scaled_up") == 1
    assert value(m, "lakeshore_queue_events_total", **work, kind="created") == 1
    # a lifecycle event is not a controller decision
    assert value(m, "lakeshore_controller_decisions_total", **work, decision="created") == 0


def test_batch_claims_and_acks_are_counted_like_single_ones(server, tenant):
    ns = tenant.namespace
    plane = HttpDispatch(server.url, token=tenant.token, namespace=ns)
    try:
        plane.submit("batch", [SubmitRequest(payload=b"\x90") for _ in range(5)])
        claims = claiming.claim_many(plane, ["batch"], worker="w", limit=4, wait_s=WAIT_S)
        assert len(claims) == 4
        forged = Ack(claims[3].id, "f" * 32, None)
        errors = plane.ack_many([Ack(c.id, c.lease, None) for c in claims[:3]] + [forged])
        assert errors[:3] == [None] * 3 and errors[3] is not None
    finally:
        plane.close()

    m = scrape(server.url)
    batch = {"namespace": ns, "queue": "batch"}
    assert value(m, "lakeshore_claims_total", **batch) == 4
    assert value(m, "lakeshore_submit_to_start_seconds_count", **batch) == 4
    assert (
        value(m, "lakeshore_completions_total", **batch, state="succeeded") == 3
    )  # not the forged
    assert value(m, "lakeshore_end_to_end_seconds_count", **batch) == 3


def test_health_and_readiness_need_no_token(server):
    assert httpx.get(f"{server.url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{server.url}/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"


def test_readyz_is_503_when_the_store_does_not_answer(tmp_path, monkeypatch):
    """In-process (the store is patched to fail), through the ASGI app without a socket."""
    import asyncio

    from dreamlake.lakeshore.server.app import create_app

    store = open_store(tmp_path / "ready.db")
    app = create_app(store)

    async def get(path: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.get(path)

    try:
        assert asyncio.run(get("/readyz")).status_code == 200

        def unreachable() -> bool:
            raise ConnectionError("database is gone")

        monkeypatch.setattr(store, "ping", unreachable)
        response = asyncio.run(get("/readyz"))
        assert response.status_code == 503
        assert "database is gone" in response.json()["detail"]
        assert asyncio.run(get("/healthz")).status_code == 200  # alive, just not ready
    finally:
        store.close()


def test_jobs_no_daemon_could_run_are_a_gauge_per_queue(server, tenant):
    """lakeshore_jobs_unschedulable (issue 34): the server's sweeper names them."""
    ns = tenant.namespace
    plane = HttpDispatch(server.url, token=tenant.token, namespace=ns)
    try:
        gpu = {"index": 0, "uuid": "u0", "name": "NVIDIA H200", "memory_mb": 143771}
        info = {"gpus": [gpu], "gpus_per_job": 0, "resources": {"gpus": 1}}
        plane.register_worker("one-gpu", queues=["train"], info=info)
        big = {"gpus": 2}
        plane.submit("train", [SubmitRequest(payload=b"\x90", resources=big) for _ in range(3)])
        plane.submit("train", [SubmitRequest(payload=b"\x90", resources={"gpus": 1})])
    finally:
        plane.close()
    deadline = time.monotonic() + 15.0  # the sweep names them within 10 s
    while (
        n := value(scrape(server.url), "lakeshore_jobs_unschedulable", namespace=ns, queue="train")
    ) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert n == 3


def test_acks_riding_a_claim_are_counted_when_they_commit_not_when_the_claim_ends(server, tenant):
    """The claim then long-polls for a job: its acks are completions already, and a scrape
    during the wait shows them (a forged lease's ack is none)."""
    ns = tenant.namespace
    plane = HttpDispatch(server.url, token=tenant.token, namespace=ns)
    riding = {"namespace": ns, "queue": "riding"}
    try:
        plane.submit("riding", [SubmitRequest(payload=b"\x90") for _ in range(3)])
        a, b, c = claiming.claim_many(plane, ["riding"], worker="w", limit=3, wait_s=WAIT_S)
        acks = [Ack(a.id, a.lease, None), Ack(b.id, b.lease, None), Ack(c.id, "f" * 32, None)]
        answer: dict[str, object] = {}
        claimer = threading.Thread(
            target=lambda: answer.update(
                got=claiming.ack_and_claim(
                    plane, acks, ["riding"], worker="w", limit=1, wait_s=60.0
                )
            )
        )
        claimer.start()
        try:
            m = wait_until(
                lambda: completed(server.url, riding, 2), timeout=WAIT_S, what="the acks counted"
            )
            assert claimer.is_alive(), "counted only once the claim had ended"
        finally:
            plane.submit("riding", [SubmitRequest(payload=b"\x90")])  # ends the long-poll
            claimer.join(WAIT_S)
    finally:
        plane.close()

    errors, claims = answer["got"]
    assert errors[:2] == [None, None] and errors[2] is not None and len(claims) == 1
    assert value(m, "lakeshore_completions_total", **riding, state="succeeded") == 2
    assert value(m, "lakeshore_end_to_end_seconds_count", **riding) == 2


@pytest.mark.slow
def test_a_daemons_jobs_are_counted_as_completions(server, tenant, tmp_path):
    """The daemon's normal path settles a job on its next claim (`POST /claims` with `acks`);
    every job it ran shows in /metrics as a completion, with its end-to-end latency."""
    plane = HttpDispatch(server.url, token=tenant.token, namespace=tenant.namespace)
    daemon = DaemonProcess(
        tmp_path,
        "metered-1",
        ["-q", "metered", "-c", "2"],
        env={
            "LAKESHORE_URL": server.url,
            "LAKESHORE_TOKEN": tenant.token,
            "LAKESHORE_NAMESPACE": tenant.namespace,
        },
    )
    try:
        daemon.ready()
        q = dls.SyncQueue("metered", dispatch=plane)
        ids = [q.submit(dls.thunk(jobs.square, i)) for i in range(JOBS)]
        assert [q.result(i, timeout=30) for i in ids] == [i * i for i in range(JOBS)]
    finally:
        daemon.stop()
        plane.close()
    metered = {"namespace": tenant.namespace, "queue": "metered"}

    m = wait_until(
        lambda: completed(server.url, metered, JOBS),
        timeout=WAIT_S,
        what=f"{JOBS} completions in /metrics",
    )
    assert value(m, "lakeshore_completions_total", **metered, state="succeeded") == JOBS
    assert value(m, "lakeshore_claims_total", **metered) == JOBS
    assert value(m, "lakeshore_end_to_end_seconds_count", **metered) == JOBS
