"""Who may call what: 401 without a known token, 403 outside the org, 404 for no namespace."""

from __future__ import annotations

import stat

import pytest

from tests.support.client import Api

ROUTES = [
    ("GET", "/queues"),
    ("POST", "/queues/default/invocations"),
    ("GET", "/invocations/01J0000000000000000000000"),
    ("POST", "/claims"),
    ("GET", "/workers"),
]


@pytest.fixture
def raw(server):
    client = Api(server.url, None)
    yield client
    client.close()


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_no_token_is_401(raw, tenant, method, path):
    status, err = raw.call(method, f"/v1/namespaces/{tenant.namespace}{path}", token=None)
    assert status == 401 and err["error"]["code"] == "unauthorized"


@pytest.mark.parametrize("header", ["Bearer nope", "Basic abc", "Bearer", "token"])
def test_bad_token_is_401(raw, tenant, header):
    status, err = raw.call(
        "GET",
        f"/v1/namespaces/{tenant.namespace}/queues",
        token=None,
        headers={"authorization": header},
    )
    assert status == 401 and err["error"]["code"] == "unauthorized"


def test_wrong_namespace_is_403(raw, make_tenant):
    mine, theirs = make_tenant(), make_tenant()
    status, err = raw.call("GET", f"/v1/namespaces/{theirs.namespace}/queues", token=mine.token)
    assert status == 403 and err["error"]["code"] == "forbidden"


def test_other_org_is_403(raw, make_tenant):
    mine, theirs = make_tenant(org="org-a"), make_tenant(org="org-b")
    status, _ = raw.call("GET", f"/v1/namespaces/{theirs.namespace}/queues", token=mine.token)
    assert status == 403


def test_org_sibling_is_allowed(raw, make_tenant):
    alice, bob = make_tenant(org="acme"), make_tenant(org="acme")
    status, body = raw.call(
        "POST", f"/v1/namespaces/{bob.namespace}/queues", {"name": "inference"}, token=alice.token
    )
    assert status == 201 and body["namespace"] == bob.namespace
    status, _ = raw.call(
        "GET", f"/v1/namespaces/{bob.namespace}/queues/inference", token=alice.token
    )
    assert status == 200


def test_unknown_namespace_is_404_with_a_valid_token(raw, tenant):
    status, err = raw.call("GET", "/v1/namespaces/no-such-ns/queues", token=tenant.token)
    assert status == 404 and "no-such-ns" in err["error"]["message"]
    # and unknown namespaces are never created by these routes
    status, _ = raw.call("GET", "/v1/namespaces/no-such-ns/queues", token=tenant.token)
    assert status == 404


def test_unknown_namespace_without_token_is_401(raw):
    assert raw.call("GET", "/v1/namespaces/no-such-ns/queues", token=None)[0] == 401


def test_hello_and_openapi_need_no_token(raw):
    assert raw.call("GET", "/v1/hello", token=None)[0] == 200
    assert raw.request("GET", "/openapi.json", token=None).status_code == 200


def test_admin_token_file_is_private_and_works(server, raw):
    path = server.home / "token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().strip() == server.token
    assert raw.call("GET", "/v1/namespaces/default/queues", token=server.token)[0] == 200


def test_tokens_are_stored_hashed(server, tenant):
    import sqlite3

    with sqlite3.connect(server.store_path) as db:
        hashes = [r[0] for r in db.execute("SELECT hash FROM tokens")]
    assert tenant.token not in hashes
    assert all(len(h) == 64 for h in hashes)
