"""The dashboard: its static files, its JSON snapshot, and the page in a real headless Chromium.

The browser test drives the system chromium through Playwright (never `playwright install`).
It skips, saying why, where either is missing, except under CI=true, where the Makefile must
have installed them and a skip would hide a broken dashboard. Every wait is a Playwright
deadline on something the page shows, never a sleep. The screenshot lands in tests/artifacts/.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from dreamlake.lakeshore import codec
from dreamlake.lakeshore.plane import HttpDispatch
from dreamlake.lakeshore.plane.dispatch import open_store
from dreamlake.lakeshore.queue import SyncQueue
from dreamlake.lakeshore.scheduling import schedule
from dreamlake.lakeshore.types import SubmitRequest
from tests.support import claiming

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: How long the page may take to show a change (it polls every second).
UI_DEADLINE_MS = 15_000


@pytest.fixture
def plane(server, tenant):
    p = HttpDispatch(server.url, token=tenant.token, namespace=tenant.namespace)
    yield p
    p.close()


def test_static_files_are_served_without_a_token(server):
    index = httpx.get(f"{server.url}/")
    assert index.status_code == 200 and "text/html" in index.headers["content-type"]
    assert "/dashboard/app.js" in index.text
    for name in ("app.js", "msgpack.js", "style.css"):
        assert httpx.get(f"{server.url}/dashboard/{name}").status_code == 200, name


def test_snapshot_needs_the_token_and_reflects_the_plane(server, tenant, plane):
    url = f"{server.url}/v1/namespaces/{tenant.namespace}/dashboard"
    assert httpx.get(url, headers={"accept": "application/json"}).status_code == 401
    plane.create_queue("snap", elasticity={"kind": "fixed", "max": 2})
    plane.register_worker("snap-w", queues=["snap"], info={"concurrency": 3, "gpus": []})
    ids = plane.submit("snap", [SubmitRequest(payload=codec.encode(i)) for i in range(3)])
    job = claiming.claim(plane, ["snap"], worker="snap-w", wait_s=10.0)
    assert job is not None
    plane.ack(job.id, job.lease, None)
    headers = {"authorization": f"Bearer {tenant.token}", "accept": "application/json"}
    snap = httpx.get(url, headers=headers).json()
    (queue,) = [q for q in snap["queues"] if q["name"] == "snap"]
    assert queue["depth"]["queued"] == 2 and queue["depth"]["succeeded"] == 1
    assert (queue["members"], queue["slots"]) == (1, 3)
    assert sum(queue["completed"]) == 1 and queue["window"]["latency_p50"] is not None
    assert len(queue["completed"]) == snap["window"]["points"]
    (worker,) = snap["workers"]
    assert worker["name"] == "snap-w" and worker["heartbeat_age_s"] < 60
    assert {r["id"] for r in snap["recent"]} == set(ids)
    assert "result" not in snap["recent"][0]
    assert any(e["kind"] == "created" and e["queue"] == "snap" for e in snap["events"])
    assert snap["schedules"] == []
    schedule("snap-nightly", "0 3 * * *", queue=SyncQueue("snap", dispatch=plane), tz="Asia/Tokyo")
    (row,) = httpx.get(url, headers=headers).json()["schedules"]
    assert (row["name"], row["cron"], row["tz"], row["queue"], row["state"]) == (
        "snap-nightly",
        "0 3 * * *",
        "Asia/Tokyo",
        "snap",
        "active",
    )
    assert row["next_fire_at"] > snap["now"] and row["last_fired_at"] is None
    assert row["missed"] == 0
    me = httpx.get(f"{server.url}/v1/whoami", headers=headers).json()
    assert me["namespace"] == tenant.namespace


@pytest.mark.parametrize(
    ("query", "allowed"),
    [
        ({"window": "inf"}, "'window' must be a finite number of seconds from 10 to 86400"),
        ({"step": "0.01"}, "'step' must be a finite number of seconds from 1 to 3600"),
    ],
)
def test_a_window_out_of_range_is_400_saying_what_is_allowed(server, tenant, query, allowed):
    url = f"{server.url}/v1/namespaces/{tenant.namespace}/dashboard"
    headers = {"authorization": f"Bearer {tenant.token}", "accept": "application/json"}

    answer = httpx.get(url, headers=headers, params=query)

    assert answer.status_code == 400
    (value,) = query.values()
    assert answer.json()["error"]["message"] == f"query parameter {allowed}; got {value!r}"


def _browser_or_skip():
    """(sync_playwright, chromium path), or a skip that says what is missing."""
    missing = []
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
        missing.append("the playwright package (pip install playwright)")
    chromium = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
    if chromium is None:
        missing.append("chromium (apt-get install chromium)")
    if missing:
        message = "browser test needs " + " and ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(message + ": under CI=true the Makefile must have installed them")
        pytest.skip(message)
    return sync_playwright, chromium


def _log_in(page: Any, url: str, token: str) -> None:
    """Open the page and send `token` through its login form, as a person would."""
    page.goto(url + "/")
    page.fill("#token", token)
    page.click("#login-form button[type=submit]")


def test_dashboard_page_in_headless_chromium(server, tenant, plane):
    sync_playwright, chromium = _browser_or_skip()
    plane.create_queue("browser-q", description="made through the API")
    gpus = [{"index": i, "name": "NVIDIA H100 80GB HBM3"} for i in range(2)]
    worker = plane.register_worker(
        "browser-worker",
        queues=["browser-q"],
        host="gpu-box-1",
        info={"concurrency": 2, "gpus": gpus},
    )
    failed = [{"index": 1, "uuid": "u1", "name": "NVIDIA H100 80GB HBM3", "reason": "Xid 79"}]
    plane.heartbeat(worker.id, {"busy": 0, "idle": 2, "gpus_failed": failed})
    store = open_store(server.store_path)
    try:  # what the controller records when it scales: the page lists it with its reason
        detail = {"from": 0, "to": 1, "reason": "backlog 1 > 0 workers"}
        store.record_event(tenant.namespace, "browser-q", "scaled_up", detail)
    finally:
        store.close()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "dashboard.png"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(UI_DEADLINE_MS)
            _log_in(page, server.url, tenant.token)
            row = page.locator('#queues tr[data-queue="browser-q"]')
            row.wait_for()
            assert page.locator("#namespace").inner_text() == tenant.namespace

            def depth(state: str) -> str:
                return row.locator(f'span.depth[data-state="{state}"]').inner_text()

            # a submit shows up as queued depth within the polling deadline; it ships a module
            code = b"x = 1\n"
            sha = hashlib.sha256(code).hexdigest()
            plane.put_runtime_blobs([(sha, code)])
            entry = {"path": "python/mymod.py", "mode": 0o644, "size": len(code), "sha256": sha}
            digest = plane.put_runtime_manifest({"entries": [entry]})
            shipped = {"bundle": digest, "sources": ["mymod"], "files": 1, "bytes": len(code)}
            (inv,) = plane.submit(
                "browser-q", [SubmitRequest(payload=codec.encode("hi"), runtime=shipped)]
            )
            page.wait_for_function(
                """() => document.querySelector(
                    '#queues tr[data-queue="browser-q"] span.depth[data-state="queued"]'
                ).textContent === '1'"""
            )
            job = claiming.claim(plane, ["browser-q"], worker="browser-worker", wait_s=10.0)
            assert job is not None and job.id == inv
            # where it runs: half of GPU 1, shown as in use beside the worker's GPUs
            share = {"index": 1, "uuid": "u1", "name": gpus[1]["name"], "share": 0.5}
            plane.place(inv, job.lease, {"worker": "browser-worker", "gpus": [share]})
            page.wait_for_function(
                """() => document.querySelector(
                    '#workers tr[data-worker="browser-worker"] td.gpus'
                ).textContent.startsWith('0.5 / 2')"""
            )
            plane.post(inv, "VALUE", codec.encode("step 1 of 2"), lease=job.lease)
            plane.post(inv, "VALUE", codec.encode({"loss": 0.25}), lease=job.lease)
            plane.ack(inv, job.lease, codec.encode("done"))
            page.wait_for_function(
                """() => document.querySelector(
                    '#queues tr[data-queue="browser-q"] span.depth[data-state="succeeded"]'
                ).textContent === '1'"""
            )
            assert depth("queued") == "0"
            # a map in flight: its jobs and how many of them have ended
            mapped = [SubmitRequest(payload=codec.encode(i), map_id="Mbrowser") for i in range(4)]
            plane.submit("browser-q", mapped)
            page.locator('#maps tr[data-map="Mbrowser"]').wait_for()
            assert "0 / 4" in page.locator('#maps tr[data-map="Mbrowser"] td.ended').inner_text()

            # schedules: the section shows once the namespace has one
            assert page.locator("#schedules-section").is_hidden()
            q = SyncQueue("browser-q", dispatch=plane)
            schedule("browser-nightly", "0 3 * * *", queue=q, payload=1, tz="Europe/Berlin")
            nightly = page.locator('#schedules tr[data-schedule="browser-nightly"]')
            nightly.wait_for()
            assert page.locator("#schedules-section").is_visible()
            cells = nightly.locator("td").all_inner_texts()
            assert cells[:5] == [
                "browser-nightly",
                "0 3 * * *",
                "Europe/Berlin",
                "browser-q",
                "active",
            ]
            assert "(in " in cells[5] and cells[6] == "\u2013" and cells[7] == "0"

            # drill down: the recent row opens the invocation and its frames
            page.locator(f'#recent tr[data-id="{inv}"]').click()
            page.locator("#frames li").nth(1).wait_for()
            frames = page.locator("#frames li").all_inner_texts()
            assert frames == ["step 1 of 2", '{"loss":0.25}']
            fields = page.locator("#detail-fields").inner_text()
            assert "succeeded" in fields
            assert digest[:19] in fields and "mymod" in fields  # what the job brought
            workers = page.locator('#workers tr[data-worker="browser-worker"]').inner_text()
            assert "gpu-box-1" in workers and "NVIDIA H100" in workers
            assert "1 failed" in workers  # a GPU the daemon took out of its offer
            assert (
                "reason=backlog 1" in page.locator('#events tr[data-kind="scaled_up"]').inner_text()
            )
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert shot.stat().st_size > 10_000


def test_the_page_says_why_a_job_waits(server, tenant, plane):
    """Issue 45 item 12: a job no live daemon could ever run, and one that waits for room, are
    told apart on the page: the queue counts the first, each row and detail gives its reason
    in the words `lakeshore jobs show` prints."""
    sync_playwright, chromium = _browser_or_skip()
    plane.create_queue("why-q")
    gpus = [{"index": i, "name": "NVIDIA H100 80GB HBM3"} for i in range(4)]
    # `resources`: a worker that places jobs, as a lakeshore-daemon registers (one without it
    # takes any job, and nothing is ever unschedulable for it)
    info = {"concurrency": 4, "gpus": gpus, "resources": {}}
    worker = plane.register_worker("why-worker", queues=["why-q"], host="gpu-box-4", info=info)
    plane.heartbeat(worker.id, {"busy": 0, "idle": 4})
    never, fits = plane.submit(
        "why-q",
        [
            SubmitRequest(payload=codec.encode("big"), resources={"gpus": 8}),
            SubmitRequest(payload=codec.encode("two"), resources={"gpus": 2}),
        ],
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "dashboard-why.png"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            # the server's pending sweep names the 8-GPU job (every LAKESHORE_PENDING_SWEEP_S),
            # then the page's next poll shows it
            page.set_default_timeout(UI_DEADLINE_MS + 10_000)
            _log_in(page, server.url, tenant.token)
            counted = '#queues tr[data-queue="why-q"] span.reason[data-reason="unschedulable"] b'
            page.wait_for_function(
                f"() => (document.querySelector('{counted}') || {{}}).textContent === '1'"
            )
            row = page.locator(f'#recent tr[data-id="{never}"]')
            assert "can never run" in row.inner_text()
            why = page.locator(f'#recent tr[data-why="{never}"]').inner_text()
            shown = plane.invocation(never)
            assert why.startswith("unschedulable") and shown.pending_reason == "unschedulable"
            # the 2-GPU job fits a live daemon: no tag says it never runs
            assert "can never run" not in page.locator(f'#recent tr[data-id="{fits}"]').inner_text()
            page.locator(f'#recent tr[data-id="{never}"]').click()
            page.wait_for_function(
                "() => document.querySelector('#detail-fields').textContent.includes('pending')"
            )
            assert "unschedulable" in page.locator("#detail-fields").inner_text()
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()


def test_a_gangs_detail_lists_its_parts_and_shows_each_ranks_frames(server, tenant, plane):
    """Issue 47 item 7: a 2-node job's drill-down lists its parts with their daemons and
    states, and a rank picker shows that rank's own frames."""
    sync_playwright, chromium = _browser_or_skip()
    plane.create_queue("gang-q")
    (inv,) = plane.submit("gang-q", [SubmitRequest(payload=codec.encode("g"), nodes=2)])
    parts = [claiming.claim(plane, ["gang-q"], worker=w) for w in ("node-a", "node-b")]
    for part, words in zip(parts, ("from rank zero", "from rank one"), strict=True):
        assert part is not None and part.gang is not None
        plane.post(inv, "VALUE", codec.encode(words), lease=part.lease)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(UI_DEADLINE_MS)
            _log_in(page, server.url, tenant.token)
            page.locator(f'#recent tr[data-id="{inv}"]').click()
            page.locator("#frames li").first.wait_for()
            assert page.locator("#frames li").all_inner_texts() == ["from rank zero"]
            fields = page.locator("#detail-fields").inner_text()
            assert "0: node-a started" in fields and "1: node-b started" in fields
            page.select_option("#detail-rank", "1")
            page.wait_for_function(
                "() => document.querySelector('#frames').textContent === 'from rank one'"
            )
        finally:
            browser.close()


def test_a_bad_token_returns_to_the_login_form(server):
    sync_playwright, chromium = _browser_or_skip()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(UI_DEADLINE_MS)
            _log_in(page, server.url, "lks_not-a-real-token")
            page.wait_for_function(
                "() => document.querySelector('#login-error').textContent.length > 0"
            )
            assert "Unknown token" in page.locator("#login-error").inner_text()
            assert page.evaluate("() => sessionStorage.getItem('lakeshore.token')") is None
        finally:
            browser.close()
