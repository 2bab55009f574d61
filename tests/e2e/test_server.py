"""Invocation, claim, lease, frame, topic and worker routes over raw HTTP."""

from __future__ import annotations

import threading
import time

import pytest

from tests.support.client import decode


def _submit(api, ns, queue="jobs", **item):
    status, body = api.call(
        "POST", ns(f"/queues/{queue}/invocations"), {"items": [{"payload": b"p", **item}]}
    )
    assert status == 201, body
    return body["ids"][0]


def _claim(api, ns, queues=("jobs",), **kw):
    status, body = api.call("POST", ns("/claims"), {"queues": list(queues), "worker": "w", **kw})
    assert status == 200, body
    return body["claim"]


def test_submit_batch_is_one_request_and_keys_are_idempotent(api, ns):
    status, body = api.call(
        "POST",
        ns("/queues/jobs/invocations"),
        {
            "items": [
                {"payload": b"a", "key": "k1"},
                {"payload": b"b"},
                {"payload": b"c", "key": "k1"},
            ]
        },
    )
    assert status == 201
    a, b, c = body["ids"]
    assert a == c and a != b
    assert api.call("GET", ns("/queues/jobs/count"))[1] == {"count": 2}


def test_submit_single_item_form(api, ns):
    status, body = api.call(
        "POST", ns("/queues/jobs/invocations"), {"payload": b"x", "priority": 2}
    )
    assert status == 201 and len(body["ids"]) == 1


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ({}, "payload"),
        ({"payload": "not-bytes"}, "payload"),
        ({"payload": b"x", "priority": "high"}, "priority"),
        ({"payload": b"x", "priority": True}, "priority"),
        ({"payload": b"x", "max_attempts": 1.5}, "max_attempts"),
        ({"payload": b"x", "key": 7}, "key"),
        ({"payload": b"x", "surprise": 1}, "surprise"),
    ],
)
def test_submit_bad_items_are_400_naming_the_field(api, ns, item, field):
    status, err = api.call("POST", ns("/queues/jobs/invocations"), {"items": [item]})
    assert status == 400
    assert field in err["error"]["message"]


def test_submit_admission_reject_is_429(api, ns):
    api.call("POST", ns("/queues"), {"name": "small", "admission": {"max_depth": 1}})
    _submit(api, ns, "small")
    response = api.request("POST", ns("/queues/small/invocations"), {"items": [{"payload": b"x"}]})
    err = decode(response)
    assert response.status_code == 429 and err["error"]["code"] == "queue_full"
    assert err["error"]["block"] is False
    assert response.headers["retry-after"] == "1"


def test_blocking_submit_waits_for_room(api, ns, server, tenant):
    """on_full: block with ?wait: the submit is held until a claim makes room."""
    from tests.support.client import Api

    api.call(
        "POST", ns("/queues"), {"name": "narrow", "admission": {"max_depth": 1, "on_full": "block"}}
    )
    _submit(api, ns, "narrow")
    other = Api(server.url, tenant.token)
    got: dict[str, object] = {}

    def blocked_submit() -> None:
        got["response"] = other.call(
            "POST",
            ns("/queues/narrow/invocations"),
            {"items": [{"payload": b"2"}]},
            params={"wait": 30},
        )

    thread = threading.Thread(target=blocked_submit)
    thread.start()
    assert _claim(api, ns, queues=["narrow"]) is not None
    thread.join(timeout=30)
    other.close()
    status, body = got["response"]  # type: ignore[misc]
    assert status == 201 and len(body["ids"]) == 1
    # without a wait, a blocking queue still answers 429 at once
    status, err = api.call("POST", ns("/queues/narrow/invocations"), {"items": [{"payload": b"3"}]})
    assert status == 429 and err["error"]["block"] is True


def test_claim_ack_and_result(api, ns):
    inv = _submit(api, ns)
    claim = _claim(api, ns)
    assert claim["id"] == inv and claim["payload"] == b"p" and claim["attempt"] == 1
    assert api.call("GET", ns(f"/invocations/{inv}"))[1]["state"] == "running"
    status, _ = api.call(
        "POST", ns(f"/invocations/{inv}/ack"), {"lease": claim["lease"], "result": b"r"}
    )
    assert status == 204
    status, row = api.call("GET", ns(f"/invocations/{inv}"))
    assert status == 200 and row["state"] == "succeeded" and row["result"] == b"r"


def test_claim_on_empty_queue_is_null(api, ns):
    assert _claim(api, ns, queues=["empty"]) is None


def test_claim_long_poll_returns_when_a_job_arrives(api, ns, server, tenant):
    from tests.support.client import Api

    other = Api(server.url, tenant.token)
    result: dict[str, object] = {}

    def claimer() -> None:
        result["claim"] = other.call(
            "POST", ns("/claims"), {"queues": ["lp"], "worker": "w", "wait": 30}
        )[1]["claim"]

    thread = threading.Thread(target=claimer)
    thread.start()
    inv = _submit(api, ns, "lp")
    thread.join(timeout=30)
    other.close()
    assert not thread.is_alive()
    assert result["claim"]["id"] == inv  # type: ignore[index]


def test_result_long_poll_returns_when_acked(api, ns, server, tenant):
    from tests.support.client import Api

    inv = _submit(api, ns)
    claim = _claim(api, ns)
    other = Api(server.url, tenant.token)
    got: dict[str, object] = {}
    thread = threading.Thread(
        target=lambda: got.update(
            row=other.call("GET", ns(f"/invocations/{inv}"), params={"wait": 30})[1]
        )
    )
    thread.start()
    api.call("POST", ns(f"/invocations/{inv}/ack"), {"lease": claim["lease"], "result": b"done"})
    thread.join(timeout=30)
    other.close()
    assert got["row"]["state"] == "succeeded"  # type: ignore[index]


def test_stale_lease_is_409_and_changes_nothing(api, ns):
    inv = _submit(api, ns)
    claim = _claim(api, ns)
    status, err = api.call(
        "POST", ns(f"/invocations/{inv}/ack"), {"lease": "not-mine", "result": None}
    )
    assert status == 409 and err["error"]["code"] == "lease_lost"
    status, _ = api.call(
        "POST", ns(f"/invocations/{inv}/frames"), {"kind": "VALUE", "value": b"v", "lease": "x"}
    )
    assert status == 409
    assert api.call("GET", ns(f"/invocations/{inv}"))[1]["state"] == "running"
    api.call("POST", ns(f"/invocations/{inv}/ack"), {"lease": claim["lease"]})


def test_nack_retry_then_fail(api, ns):
    inv = _submit(api, ns, max_attempts=1)
    claim = _claim(api, ns)
    status, body = api.call(
        "POST", ns(f"/invocations/{inv}/nack"), {"lease": claim["lease"], "error": "boom"}
    )
    assert status == 200 and body == {"state": "failed"}
    row = api.call("GET", ns(f"/invocations/{inv}"))[1]
    assert row["state"] == "failed" and row["error"] == "boom"


def test_end_as_killed_and_bad_state(api, ns):
    inv = _submit(api, ns)
    claim = _claim(api, ns)
    status, _ = api.call(
        "POST", ns(f"/invocations/{inv}/end"), {"lease": claim["lease"], "state": "happy"}
    )
    assert status == 400
    status, _ = api.call(
        "POST",
        ns(f"/invocations/{inv}/end"),
        {"lease": claim["lease"], "state": "killed", "error": "k"},
    )
    assert status == 204
    assert api.call("GET", ns(f"/invocations/{inv}"))[1]["state"] == "killed"


def test_release_and_renew(api, ns):
    inv = _submit(api, ns)
    claim = _claim(api, ns)
    status, body = api.call(
        "POST", ns("/leases/renew"), {"leases": [claim["lease"]], "lease_s": 30}
    )
    assert status == 200 and body == {"leases": {inv: False}}
    status, body = api.call("POST", ns(f"/invocations/{inv}/release"), {"lease": claim["lease"]})
    assert status == 200 and body == {"released": True}
    assert api.call("GET", ns(f"/invocations/{inv}"))[1]["state"] == "queued"
    assert (
        api.call("POST", ns("/leases/renew"), {"leases": [claim["lease"]], "lease_s": -1})[0] == 400
    )


def test_cancel_queued_and_kill_running(api, ns):
    queued = _submit(api, ns, "c1")
    assert api.call("POST", ns(f"/invocations/{queued}/cancel"))[1] == {"cancelled": True}
    assert api.call("GET", ns(f"/invocations/{queued}"))[1]["state"] == "cancelled"
    running = _submit(api, ns, "c2")
    claim = _claim(api, ns, queues=["c2"])
    assert api.call("POST", ns(f"/invocations/{running}/cancel"), {})[1] == {"cancelled": False}
    assert api.call("POST", ns(f"/invocations/{running}/cancel"), {"kill": True})[1] == {
        "cancelled": True
    }
    _, body = api.call("POST", ns("/leases/renew"), {"leases": [claim["lease"]], "lease_s": 30})
    assert body["leases"][running] is True
    assert api.call("POST", ns(f"/invocations/{running}/cancel"), {"kill": "yes"})[0] == 400


def test_count_states(api, ns):
    _submit(api, ns, "cnt")
    assert api.call("GET", ns("/queues/cnt/count"), params={"state": "queued"})[1] == {"count": 1}
    assert api.call("GET", ns("/queues/cnt/count"), params={"state": "running"})[1] == {"count": 0}
    status, err = api.call("GET", ns("/queues/cnt/count"), params={"state": "sleeping"})
    assert status == 400 and "sleeping" in err["error"]["message"]


def test_unknown_invocation_is_404(api, ns):
    for method, path, body in [
        ("GET", "/invocations/nope", None),
        ("POST", "/invocations/nope/cancel", {}),
        ("POST", "/invocations/nope/ack", {"lease": "x"}),
        ("GET", "/invocations/nope/frames", None),
    ]:
        assert api.call(method, ns(path), body)[0] == 404, path


def test_other_namespaces_invocation_is_404(api, ns, make_tenant, server):
    from tests.support.client import Api

    stranger = make_tenant()
    client = Api(server.url, stranger.token)
    _, body = client.call(
        "POST",
        f"/v1/namespaces/{stranger.namespace}/queues/jobs/invocations",
        {"items": [{"payload": b"secret"}]},
    )
    client.close()
    (foreign,) = body["ids"]
    assert api.call("GET", ns(f"/invocations/{foreign}"))[0] == 404
    assert api.call("GET", ns(f"/invocations/{foreign}/frames"))[0] == 404


def test_invocation_frames_stream_and_end(api, ns):
    inv = _submit(api, ns)
    claim = _claim(api, ns)
    for v in (b"1", b"2"):
        status, body = api.call(
            "POST",
            ns(f"/invocations/{inv}/frames"),
            {"kind": "VALUE", "value": v, "lease": claim["lease"]},
        )
        assert status == 201
    assert body == {"seq": 1}
    _, body = api.call("GET", ns(f"/invocations/{inv}/frames"), params={"since": 0})
    assert [(f["seq"], f["value"]) for f in body["frames"]] == [(1, b"2")]
    _, body = api.call("GET", ns(f"/invocations/{inv}/frames"), params={"since": 1})
    assert body == {"frames": [], "ended": False}
    api.call("POST", ns(f"/invocations/{inv}/ack"), {"lease": claim["lease"], "result": None})
    # a finished journal needs no END frame: the wait returns at once, saying it ended
    _, body = api.call("GET", ns(f"/invocations/{inv}/frames"), params={"since": 1, "wait": 30})
    assert body == {"frames": [], "ended": True}


def test_topic_frames(api, ns):
    path = ns("/topics/jobs/news/frames")
    assert api.call("POST", path, {"kind": "VALUE", "value": b"hello"}) == (201, {"seq": 0})
    assert api.call("POST", path, {"kind": "END"}) == (201, {"seq": 1})
    _, body = api.call("GET", path)
    assert [(f["kind"], f["value"]) for f in body["frames"]] == [("VALUE", b"hello"), ("END", None)]
    assert api.call("POST", path, {"kind": "VALUE", "value": b"late"})[0] == 409
    assert api.call("POST", path, {"kind": "WHATEVER"})[0] == 400
    assert api.call("GET", ns("/topics/jobs/Bad_Name/frames"))[0] == 400


def test_workers_register_heartbeat_list_show_state(api, ns):
    status, w = api.call(
        "POST",
        ns("/workers"),
        {
            "name": "gpu-box",
            "queues": ["train"],
            "host": "h",
            "pid": 42,
            "info": {"concurrency": 2},
        },
    )
    assert status == 201 and w["queues"] == ["train"] and w["pid"] == 42
    status, hb = api.call("POST", ns(f"/workers/{w['id']}/heartbeat"), {"load": {"cpu": 0.5}})
    assert status == 200 and hb["load"] == {"cpu": 0.5}
    assert [x["name"] for x in api.call("GET", ns("/workers"))[1]["workers"]] == ["gpu-box"]
    assert api.call("GET", ns("/workers/gpu-box"))[1]["id"] == w["id"]
    assert (
        api.call("POST", ns("/workers/gpu-box/state"), {"state": "draining"})[1]["state"]
        == "draining"
    )
    assert api.call("POST", ns("/workers/gpu-box/state"), {"state": "sleepy"})[0] == 400
    assert api.call("POST", ns("/workers/ghost/heartbeat"), {"load": {}})[0] == 404
    assert api.call("POST", ns("/workers"), {"name": "Bad Name"})[0] == 400


def test_sweeper_requeues_an_expired_lease_without_any_claim(api, ns):
    """Nobody claims again: only the server's sweeper can move the job back to queued."""
    inv = _submit(api, ns, "sw")
    claim = _claim(api, ns, queues=["sw"], lease_s=0.2)
    assert claim is not None
    # the row goes back to queued on the sweeper's next tick; a lease running out has no
    # wake-up to wait on, so poll the row (each read waits up to 0.5 s on the server)
    status, row = api.call("GET", ns(f"/invocations/{inv}"))
    assert status == 200
    deadline = time.monotonic() + 10
    while row["state"] != "queued" and time.monotonic() < deadline:
        status, row = api.call("GET", ns(f"/invocations/{inv}"), params={"wait": 0.5})
    assert row["state"] == "queued"


def test_claim_with_limit_answers_a_list_in_one_request(api, ns):
    ids = [_submit(api, ns) for _ in range(3)]

    status, body = api.call("POST", ns("/claims"), {"queues": ["jobs"], "worker": "w", "limit": 2})

    assert status == 200 and set(body) == {"claims"}
    assert [c["id"] for c in body["claims"]] == ids[:2]
    assert api.call("GET", ns("/queues/jobs/count"), params={"state": "running"})[1] == {"count": 2}


@pytest.mark.parametrize("limit", [0, 1001, "2", 1.5])
def test_claim_limit_out_of_range_is_400_and_claims_nothing(api, ns, limit):
    _submit(api, ns)

    status, body = api.call(
        "POST", ns("/claims"), {"queues": ["jobs"], "worker": "w", "limit": limit}
    )

    assert status == 400 and "limit" in body["error"]["message"]
    assert api.call("GET", ns("/queues/jobs/count"))[1] == {"count": 1}


def test_acks_settle_a_batch_and_name_each_refusal(api, ns):
    inv = _submit(api, ns)
    claim = _claim(api, ns)

    status, body = api.call(
        "POST",
        ns("/acks"),
        {
            "acks": [
                {"id": claim["id"], "lease": claim["lease"], "result": b"r"},
                {"id": "01J00000000000000000000000", "lease": "x"},
            ]
        },
    )

    assert status == 200
    assert body["errors"][0] is None
    assert body["errors"][1]["code"] == "not_found"
    status, row = api.call("GET", ns(f"/invocations/{inv}"))
    assert row["state"] == "succeeded" and row["result"] == b"r"


def test_acks_cannot_settle_another_namespaces_invocation(api, ns, server, make_tenant):
    from tests.support.client import Api

    other = make_tenant()
    theirs = Api(server.url, other.token)
    try:
        their_ns = f"/v1/namespaces/{other.namespace}"
        _, sub = theirs.call("POST", their_ns + "/queues/jobs/invocations", {"payload": b"p"})
        _, got = theirs.call("POST", their_ns + "/claims", {"queues": ["jobs"], "worker": "w"})
        claim = got["claim"]

        status, body = api.call(
            "POST", ns("/acks"), {"acks": [{"id": claim["id"], "lease": claim["lease"]}]}
        )

        assert status == 200 and body["errors"][0]["code"] == "not_found"
        assert theirs.call("GET", their_ns + f"/invocations/{sub['ids'][0]}")[1]["state"] == (
            "running"
        )
    finally:
        theirs.close()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "acks"),
        ({"acks": "x"}, "acks"),
        ({"acks": [{"lease": "l"}]}, "acks[0].id"),
        ({"acks": [{"id": "i"}]}, "acks[0].lease"),
        ({"acks": [{"id": "i", "lease": "l", "extra": 1}]}, "extra"),
        ({"acks": [{"id": "i", "lease": "l"}] * 1001}, "acks"),
    ],
)
def test_malformed_acks_are_400_naming_the_field(api, ns, body, field):
    status, err = api.call("POST", ns("/acks"), body)

    assert status == 400 and field in err["error"]["message"]


def test_submit_with_result_wait_answers_the_invocation_as_it_stands(api, ns):
    status, body = api.call(
        "POST", ns("/queues/jobs/invocations"), {"payload": b"p"}, params={"result_wait": 0.1}
    )

    assert status == 201 and len(body["ids"]) == 1
    assert body["invocation"]["id"] == body["ids"][0]
    assert body["invocation"]["state"] == "queued"  # nobody served it within the wait


def test_submit_with_result_wait_is_woken_by_the_ack(api, ns):
    answer = {}

    def submit() -> None:
        answer["got"] = api.call(
            "POST", ns("/queues/jobs/invocations"), {"payload": b"p"}, params={"result_wait": 20}
        )

    producer = threading.Thread(target=submit)
    producer.start()
    claim = None
    while claim is None:
        claim = _claim(api, ns, wait=5)
    api.call(
        "POST", ns(f"/invocations/{claim['id']}/ack"), {"lease": claim["lease"], "result": b"r"}
    )
    producer.join(20)

    status, body = answer["got"]
    assert status == 201
    assert body["invocation"]["state"] == "succeeded" and body["invocation"]["result"] == b"r"


def test_result_wait_on_a_batch_is_400_and_submits_nothing(api, ns):
    status, body = api.call(
        "POST",
        ns("/queues/jobs/invocations"),
        {"items": [{"payload": b"a"}, {"payload": b"b"}]},
        params={"result_wait": 1},
    )

    assert status == 400 and "result_wait" in body["error"]["message"]
    assert api.call("GET", ns("/queues/jobs/count"))[1] == {"count": 0}


def test_a_claim_whose_client_hung_up_goes_back_to_the_queue_at_once(api, ns, server, tenant):
    """The long-poll wakes with work, sees its caller gone, and releases the claim instead of
    leaving the job to a lease nobody renews (60 s here)."""
    import httpx

    hung = httpx.Client(headers={"authorization": f"Bearer {tenant.token}"})
    with pytest.raises(httpx.ReadTimeout):
        hung.post(
            f"{server.url}{ns('/claims')}",
            json={"queues": ["jobs"], "worker": "gone", "wait": 30},
            timeout=0.5,
        )
    hung.close()  # the server sees the connection drop while the long-poll is held

    inv = _submit(api, ns)

    deadline = time.monotonic() + 10
    claim = None
    while claim is None and time.monotonic() < deadline:
        claim = _claim(api, ns, wait=1)
    assert claim is not None and claim["id"] == inv
    assert claim["attempt"] == 1  # the released claim spent no attempt


@pytest.mark.parametrize("wait", ["inf", "-1", "nan", "soon"])
def test_a_wait_out_of_range_is_400_saying_what_is_allowed(api, ns, wait):
    """`?wait=inf` used to be refused as "must be between 0.0 and inf", which it seems to be."""
    inv = _submit(api, ns, queue="held")
    for method, path, param in [
        ("GET", f"/invocations/{inv}", "wait"),
        ("GET", f"/invocations/{inv}/frames", "wait"),
        ("POST", "/queues/waits/invocations", "wait"),
        ("POST", "/queues/waits/invocations", "result_wait"),
    ]:
        body = {"items": [{"payload": b"p"}]} if method == "POST" else None
        status, err = api.call(method, ns(path), body, params={param: wait})

        assert status == 400, (path, param, err)
        message = err["error"]["message"]
        assert message == (
            f"query parameter '{param}' must be a finite number of seconds, 0 or more (the "
            f"server holds a request at most 60 s; ask again to wait longer); got '{wait}'"
        )
    assert api.call("GET", ns("/queues/waits/count"))[1] == {"count": 0}  # nothing submitted
