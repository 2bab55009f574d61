"""The wire: msgpack and JSON bodies, base64 bytes in JSON, malformed input, size limits.

Whatever a client sends, the answer is a 4xx in the `{error: {code, message}}` shape, never 500.
"""

from __future__ import annotations

import base64
import json

import msgpack
import pytest

import dreamlake.lakeshore as dls
from tests.support.client import Api, decode
from tests.support.server import running_server


def test_hello_advertises_versions(api):
    from dreamlake.lakeshore import __version__, codec

    status, hello = api.call("GET", "/v1/hello", token=None)
    assert status == 200
    assert hello["version"] == __version__
    assert hello["codec_version"] == codec.CODEC_VERSION
    assert hello["pickle_protocol"] == codec.PICKLE_PROTOCOL
    assert hello["bytes_in_json"] == "base64"


def test_openapi_lists_every_served_route(api):
    from dreamlake.lakeshore.server.app import all_apis

    response = api.request("GET", "/openapi.json", token=None)
    assert response.headers["content-type"].startswith("application/json")
    doc = response.json()
    assert doc["openapi"].startswith("3.")
    for route in all_apis():
        assert route.method.lower() in doc["paths"][route.full_path], route.full_path
    submit = doc["paths"]["/v1/namespaces/{ns}/queues/{queue}/invocations"]["post"]
    assert "201" in submit["responses"] and "429" in submit["responses"]


def test_json_in_json_out_with_base64_payloads(api, ns):
    payload = bytes(range(256))
    status, body = api.call(
        "POST",
        ns("/queues/js/invocations"),
        {"items": [{"payload": base64.b64encode(payload).decode()}]},
        as_json=True,
    )
    assert status == 201
    (inv,) = body["ids"]
    status, body = api.call("POST", ns("/claims"), {"worker": "w", "queues": ["js"]}, as_json=True)
    assert base64.b64decode(body["claim"]["payload"]) == payload
    # and the same bytes come back as msgpack bin to a msgpack client
    status, row = api.call("GET", ns(f"/invocations/{inv}"))
    assert status == 200 and row["state"] == "running"


def test_a_checkpoint_rides_base64_in_json_as_the_document_says(api, ns):
    """`Checkpoint.checkpoint` is a bytes field: base64 in JSON, like payload (it was refused
    as 'must be bytes', the one bytes field a JSON client could not send)."""
    api.call("POST", ns("/queues/ck/invocations"), {"items": [{"json": 1}]}, as_json=True)
    _, body = api.call("POST", ns("/claims"), {"worker": "w", "queues": ["ck"]}, as_json=True)
    claim = body["claim"]
    # a checkpoint is an encoded spilled Ref (the state lives in storage, not the row)
    ref = dls.Ref(id="1" * 26, size=10, digest="0" * 32, storage="file:///nowhere", spilled=True)
    state = dls.encode(ref)
    status, _ = api.call(
        "POST",
        ns(f"/invocations/{claim['id']}/checkpoint"),
        {"lease": claim["lease"], "checkpoint": base64.b64encode(state).decode()},
        as_json=True,
    )
    assert status == 200
    _, row = api.call("GET", ns(f"/invocations/{claim['id']}"), as_json=True)
    assert base64.b64decode(row["checkpoint"]) == state


def test_json_error_bodies_when_json_is_asked(api, ns):
    response = api.request("GET", ns("/queues/nope"), as_json=True)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_request_content_type_json_implies_json_response(api, ns):
    response = api.request(
        "POST",
        ns("/queues"),
        content=b'{"name": "via-curl"}',
        headers={"content-type": "application/json", "accept": "*/*"},
    )
    assert response.status_code == 201
    assert response.json()["name"] == "via-curl"


@pytest.mark.parametrize(
    ("content", "content_type"),
    [
        (b"\xc1\xc1\xc1", "application/msgpack"),  # 0xc1 is never valid msgpack
        (b"\x92\x01", "application/msgpack"),  # truncated array
        (msgpack.packb([1, 2, 3]), "application/msgpack"),  # not a map
        (msgpack.packb({1: "int key"}), "application/msgpack"),
        (b"{not json", "application/json"),
        (b"[1, 2]", "application/json"),
        (b'"just a string"', "application/json"),
        (b"\xff\xfe", "application/json"),
        (b'{"items": [{"payload": "***not base64***"}]}', "application/json"),
        (b'{"items": "many"}', "application/json"),
        (b'{"items": [1, 2]}', "application/json"),
        (b'{"items": [{"payload": "eA==", "priority": 1e999}]}', "application/json"),
        (b"[" * 100_000, "application/json"),
        (b"\x91" * 100_000, "application/msgpack"),
    ],
)
def test_malformed_bodies_are_400(api, ns, content, content_type):
    response = api.request(
        "POST",
        ns("/queues/m/invocations"),
        content=content,
        headers={"content-type": content_type},
    )
    assert response.status_code == 400, response.content[:300]
    assert decode(response)["error"]["code"] == "invalid_argument"


def test_unknown_content_type_is_415(api, ns):
    response = api.request(
        "POST",
        ns("/queues"),
        content=b"name=x",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert response.status_code == 415
    assert "application/json" in decode(response)["error"]["message"]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/claims", {}, "worker"),
        ("/claims", {"worker": 3}, "worker"),
        ("/claims", {"worker": "w", "queues": "jobs"}, "queues"),
        ("/claims", {"worker": "w", "lease_s": 0}, "lease_s"),
        ("/claims", {"worker": "w", "wait": "soon"}, "wait"),
        ("/claims", {"worker": "w", "kind": "random"}, "random"),
        ("/claims", {"worker": "w", "acks": "all"}, "acks"),
        ("/claims", {"worker": "w", "acks": [{"id": "x"}]}, "lease"),
        ("/claims", {"worker": "w", "acks": [{"id": "x", "lease": "y", "more": 1}]}, "more"),
        ("/claims", {"worker": "w", "acks": [{"id": "x", "lease": "y"}] * 1001}, "1000"),
        ("/queues", {"name": "ok", "elasticity": [1]}, "elasticity"),
        ("/queues", {"name": "ok", "elasticity": {"kind": "warp"}}, "warp"),
        ("/leases/renew", {"leases": [1, 2]}, "leases"),
        ("/workers", {"name": "w", "pid": "one"}, "pid"),
        ("/workers", {"name": "w", "info": "x"}, "info"),
    ],
)
def test_wrong_types_are_400_naming_the_field(api, ns, path, body, field):
    status, err = api.call("POST", ns(path), body)
    assert status == 400, err
    assert field in err["error"]["message"]


@pytest.mark.parametrize(
    ("params", "field"),
    [({"wait": "x"}, "wait"), ({"wait": "-1"}, "wait"), ({"wait": "nan"}, "wait")],
)
def test_bad_query_parameters_are_400(api, ns, params, field):
    status, err = api.call("GET", ns("/invocations/whatever"), params=params)
    assert status == 400 and field in err["error"]["message"]


def test_unknown_route_and_method(api):
    status, err = api.call("GET", "/v1/nothing-here")
    assert status == 404 and err["error"]["code"] == "not_found"
    status, err = api.call("PUT", "/v1/hello")
    assert status == 405 and err["error"]["code"] == "method_not_allowed"


@pytest.fixture(scope="module")
def small_server(tmp_path_factory):
    """A server whose body limit is 1 MiB, so oversized bodies stay cheap to send."""
    with running_server(tmp_path_factory.mktemp("small"), extra_args=("--max-body-mb", "1")) as s:
        yield s


def test_oversized_body_is_413(small_server):
    url, token = small_server
    client = Api(url, token)
    try:
        big = {"items": [{"payload": b"x" * (2 * 1024 * 1024)}]}
        status, err = client.call("POST", "/v1/namespaces/default/queues/big/invocations", big)
        assert status == 413 and err["error"]["code"] == "payload_too_large"

        def chunks():  # no Content-Length: the limit is enforced while streaming
            for _ in range(40):
                yield b"\x00" * 65536

        response = client.client.post(
            "/v1/namespaces/default/queues/big/invocations",
            content=chunks(),
            headers={"authorization": f"Bearer {token}", "content-type": "application/msgpack"},
        )
        assert response.status_code == 413
        # just under the limit is fine
        ok = {"items": [{"payload": b"x" * (900 * 1024)}]}
        assert client.call("POST", "/v1/namespaces/default/queues/big/invocations", ok)[0] == 201
    finally:
        client.close()


def test_json_bytes_fields_nested_in_items_only(api, ns):
    """A string 'value' outside a bytes position is not base64-decoded by accident."""
    status, body = api.call(
        "POST", ns("/queues"), {"name": "meta", "description": "value"}, as_json=True
    )
    assert status == 201 and body["description"] == "value"
    assert json.loads(json.dumps(body))["name"] == "meta"


@pytest.mark.parametrize("name", ["nl%0A", "sp%20", "%00x", "tr%D0%B0ining", "a" * 300])
def test_a_hostile_queue_name_in_the_path_is_400_and_creates_nothing(api, ns, name):
    response = api.request("POST", ns(f"/queues/{name}/invocations"), {"items": [{"json": 1}]})

    assert response.status_code == 400, response.content[:300]
    assert "names match" in decode(response)["error"]["message"]
    listed = decode(api.request("GET", ns("/queues")))
    assert {q["name"] for q in listed["queues"]} <= {"default"}
