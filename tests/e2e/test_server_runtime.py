"""Job runtimes over raw HTTP (issue 46): what a curl producer sends, and who may send it."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest

from dreamlake.lakeshore.plane.dispatch import open_store
from tests.support.client import Api


@pytest.fixture
def raw(server) -> Iterator[Api]:
    client = Api(server.url, None)
    yield client
    client.close()


@pytest.fixture
def tokens(server, make_tenant) -> tuple[str, dict[str, str]]:
    ns = make_tenant(prefix="runtime").namespace
    store = open_store(server.store_path)
    try:
        made = {
            "data": store.create_token(ns, label="data", scopes=("submit-data", "read")),
            "code": store.create_token(ns, label="code", scopes=("submit-code", "read")),
            "work": store.create_token(ns, label="work", scopes=("work",)),
        }
    finally:
        store.close()
    return ns, made


def _file(text: bytes) -> dict[str, object]:
    return {"sha256": hashlib.sha256(text).hexdigest(), "data": text}


def test_a_curl_producer_ships_a_folder_and_a_worker_reads_it_back(raw, tokens) -> None:
    ns, t = tokens
    base = f"/v1/namespaces/{ns}/runtime"
    blob = _file(b"print('hi')\n")
    status, answer = raw.call(
        "POST", f"{base}/missing", {"blobs": [blob["sha256"]]}, token=t["code"]
    )
    assert (status, answer) == (200, {"missing": [blob["sha256"]]})
    assert raw.call("POST", f"{base}/blobs", {"blobs": [blob]}, token=t["code"]) == (
        200,
        {"stored": 1},
    )
    entry = {"path": "workdir/train.py", "mode": 0o644, "size": 12, "sha256": blob["sha256"]}
    status, answer = raw.call(
        "POST", f"{base}/manifests", {"manifest": {"entries": [entry]}}, token=t["code"]
    )
    assert status == 200, answer
    digest = answer["digest"]
    spec = {"bundle": digest, "workdir": True, "files": 1, "bytes": 12}
    submit = f"/v1/namespaces/{ns}/queues/rt/invocations"
    status, answer = raw.call("POST", submit, {"json": 1, "runtime": spec}, token=t["code"])
    assert status == 201, answer
    status, row = raw.call(
        "GET", f"/v1/namespaces/{ns}/invocations/{answer['ids'][0]}", token=t["code"]
    )
    assert status == 200 and row["runtime"]["bundle"] == digest
    # the namespace's worker reads what shipped back by name
    status, read = raw.call("GET", f"{base}/manifests/{digest}", token=t["work"])
    assert status == 200 and read["manifest"]["entries"] == [entry]
    status, read = raw.call("GET", f"{base}/blobs/{blob['sha256']}", token=t["work"])
    assert status == 200 and read["data"] == blob["data"]


def test_shipping_code_needs_submit_code(raw, tokens) -> None:
    ns, t = tokens
    base = f"/v1/namespaces/{ns}/runtime"
    blob = _file(b"x = 1\n")
    for method, path, body in (
        ("POST", f"{base}/missing", {"blobs": [blob["sha256"]]}),
        ("POST", f"{base}/blobs", {"blobs": [blob]}),
        ("POST", f"{base}/manifests", {"manifest": {"entries": []}}),
    ):
        status, err = raw.call(method, path, body, token=t["data"])
        assert status == 403 and "submit-code" in err["error"]["message"], (path, err)
    submit = f"/v1/namespaces/{ns}/queues/rt/invocations"
    status, err = raw.call(
        "POST", submit, {"json": 1, "runtime": {"requirements": ["numpy"]}}, token=t["data"]
    )
    assert status == 403 and "runtime ships code" in err["error"]["message"]
    assert "scopes: read, submit-data" in err["error"]["message"]
    status, count = raw.call("GET", f"/v1/namespaces/{ns}/queues/rt/count", token=t["data"])
    assert status in (200, 404) and count.get("count", 0) == 0


@pytest.mark.parametrize(
    ("path", "link", "words"),
    [
        ("../x", None, "holds '..'"),
        ("/etc/x", None, "is absolute"),
        ("workdir/evil", "../../outside", "leads out of the tree"),
    ],
)
def test_an_escaping_manifest_over_raw_http_is_400_and_stores_nothing(
    raw, tokens, path, link, words
) -> None:
    ns, t = tokens
    base = f"/v1/namespaces/{ns}/runtime"
    blob = _file(b"evil\n")
    raw.call("POST", f"{base}/blobs", {"blobs": [blob]}, token=t["code"])
    entry: dict[str, object] = {"path": path, "mode": 0o644, "size": 5}
    entry.update({"link": link} if link else {"sha256": blob["sha256"]})
    status, err = raw.call(
        "POST", f"{base}/manifests", {"manifest": {"entries": [entry]}}, token=t["code"]
    )
    assert status == 400 and words in err["error"]["message"], err
    store_digest = hashlib.sha256(b"").hexdigest()  # nothing else was stored under any name
    status, _ = raw.call("GET", f"{base}/manifests/sha256:{store_digest}", token=t["work"])
    assert status == 404


def test_a_blob_of_another_namespace_is_not_found(raw, tokens, make_tenant) -> None:
    ns, t = tokens
    other = make_tenant(prefix="runtime-other")
    blob = _file(b"secret = 1\n")
    raw.call("POST", f"/v1/namespaces/{ns}/runtime/blobs", {"blobs": [blob]}, token=t["code"])
    status, _ = raw.call(
        "GET", f"/v1/namespaces/{other.namespace}/runtime/blobs/{blob['sha256']}", token=other.token
    )
    assert status == 404
    status, _ = raw.call(
        "GET", f"/v1/namespaces/{ns}/runtime/blobs/{blob['sha256']}", token=other.token
    )
    assert status == 403
