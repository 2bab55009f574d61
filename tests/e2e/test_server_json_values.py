"""JSON producers (curl, other languages): `json` items in, `result_json` out.

The server encodes a JSON value as msgpack on submit and shows plain msgpack results as JSON;
it never interprets an ext type (a pickled thunk, a tensor), which stays opaque bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane.http import HttpDispatch
from tests.support.client import Api


def test_a_json_item_is_a_payload_workers_decode(
    api: Api, ns: Callable[[str], str], http_plane: Callable[..., HttpDispatch], tenant: Any
) -> None:
    status, body = api.call(
        "POST", ns("/queues/inference/invocations"), {"json": {"prompt": "hello"}}, as_json=True
    )
    assert status == 201, body
    (inv,) = body["ids"]

    q = dls.SyncQueue(
        "inference", dispatch=http_plane(namespace=tenant.namespace, token=tenant.token)
    )
    job = q.claim()
    assert job is not None and job.id == inv
    assert job.payload == {"prompt": "hello"}
    q.ack(job, {"answer": [1, 2]})

    status, row = api.call("GET", ns(f"/invocations/{inv}"), as_json=True)
    assert status == 200
    assert row["state"] == "succeeded"
    assert row["result_json"] == {"answer": [1, 2]}


def test_a_result_holding_an_ext_type_stays_opaque(
    api: Api, ns: Callable[[str], str], http_plane: Callable[..., HttpDispatch], tenant: Any
) -> None:
    q = dls.SyncQueue(
        "inference", dispatch=http_plane(namespace=tenant.namespace, token=tenant.token)
    )
    inv = q.submit({"x": 1})
    job = q.claim()
    assert job is not None
    q.ack(job, (1, 2))  # a tuple rides as an ext type

    status, row = api.call("GET", ns(f"/invocations/{inv}"), as_json=True)
    assert status == 200
    assert "result_json" not in row
    assert isinstance(row["result"], str)  # base64 of the msgpack bytes


def test_payload_and_json_together_are_refused(api: Api, ns: Callable[[str], str]) -> None:
    status, body = api.call(
        "POST", ns("/queues/q/invocations"), {"json": 1, "payload": "gA=="}, as_json=True
    )
    assert status == 400
    assert "not both" in body["error"]["message"]


def test_integers_past_64_bits_ride_whole_and_what_no_codec_carries_is_400(
    api: Api, ns: Callable[[str], str], http_plane: Callable[..., HttpDispatch], tenant: Any
) -> None:
    big = [2**64, -(2**63) - 1, 10**30]
    status, body = api.call(
        "POST", ns("/queues/wide/invocations"), {"json": {"n": big}}, as_json=True
    )
    assert status == 201, body
    q = dls.SyncQueue("wide", dispatch=http_plane(namespace=tenant.namespace, token=tenant.token))
    job = q.claim()
    assert job is not None and job.payload == {"n": big}

    raw = b'{"items": [{"json": "\\ud800"}]}'
    response = api.request(
        "POST",
        ns("/queues/wide/invocations"),
        content=raw,
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400
    assert "items[0].json" in response.text and "UnicodeEncodeError" in response.text


def test_a_query_number_past_64_bits_is_400(api: Api, ns: Callable[[str], str]) -> None:
    status, body = api.call("POST", ns("/queues/q/invocations"), {"json": 1}, as_json=True)
    assert status == 201, body
    (inv,) = body["ids"]
    for query in ("since=" + "9" * 30, "since=-" + "9" * 30):
        response = api.request("GET", ns(f"/invocations/{inv}/frames?{query}"))
        assert response.status_code == 400, response.text
        assert "64-bit integer" in response.text
