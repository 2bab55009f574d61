"""Bad input on every route: property-based fuzzing from the served OpenAPI document, plus the
cases a fuzzer rarely finds (truncated msgpack, deep nesting, bodies past the limit sent slowly).

The rule under test: never a 5xx for anything a client sent; every 4xx carries a message.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from procs import ServerProcess

pytestmark = pytest.mark.slow

LIMIT_MB = 1
WEIRD = ["", " ", "..", "%2e%2e", "a" * 300, "UPPER", "ü", "-lead", "x y", "null", "0", "q\x00"]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path_factory.mktemp("fuzz"), args=["--max-body-mb", str(LIMIT_MB)]) as s:
        yield s


@pytest.fixture(scope="module")
def client(srv: ServerProcess) -> Iterator[httpx.Client]:
    headers = {"authorization": f"Bearer {srv.token}"}
    with httpx.Client(base_url=srv.url, headers=headers, timeout=10) as c:
        yield c


def check(response: httpx.Response, what: Any) -> None:
    assert response.status_code < 500, (what, response.status_code, response.content[:300])
    if response.status_code >= 400:
        ctype = response.headers.get("content-type", "")
        body = response.json() if "json" in ctype else msgpack.unpackb(response.content)
        assert body["error"]["message"], (what, body)


# -- property-based: every documented route ------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(),
    st.text(max_size=40),
    st.binary(max_size=40),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
names = st.one_of(
    st.from_regex(r"\A[a-z0-9][a-z0-9-]{0,12}\Z"), st.sampled_from(WEIRD), st.text(max_size=20)
)


def route_table(url: str) -> list[tuple[str, str, list[str]]]:
    doc = httpx.get(f"{url}/openapi.json").json()
    schemas = doc.get("components", {}).get("schemas", {})
    out = []
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method not in ("get", "post", "patch", "delete", "put"):
                continue
            ref = op.get("requestBody", {}).get("content", {}).values() or [{}]
            props: list[str] = []
            for media in ref:
                target = media.get("schema", {}).get("$ref", "").rsplit("/", 1)[-1]
                props += list(schemas.get(target, {}).get("properties", {}))
            out.append((method.upper(), path, sorted(set(props))))
    return out


@st.composite
def requests(draw: st.DrawFn, table: list[tuple[str, str, list[str]]]) -> dict[str, Any]:
    method, path, fields = draw(st.sampled_from(table))
    for param in [p for p in path.split("/") if p.startswith("{")]:
        value = "default" if param == "{ns}" and draw(st.booleans()) else draw(names)
        path = path.replace(param, quote(value, safe="") or "x", 1)
    field_names = st.sampled_from(fields) if fields else st.text(max_size=8)
    body: dict[str, Any] = draw(
        st.dictionaries(field_names | st.text(max_size=6), values, max_size=6)
    )
    if "wait" in body:
        body["wait"] = draw(st.one_of(st.floats(0, 0.2), values))  # a long-poll stays short
    params = draw(
        st.dictionaries(
            st.sampled_from(
                ["since", "state", "limit", "force", "verbose", "before", "kind", "elasticity"]
            ),
            st.text(max_size=12),
            max_size=3,
        )
    )
    encoding = draw(st.sampled_from(["msgpack", "json", "raw", "truncated", "none"]))
    if encoding == "msgpack":
        content, ctype = msgpack.packb(body, use_bin_type=True), "application/msgpack"
    elif encoding == "json":
        content = json.dumps(body, default=lambda b: b.hex()).encode()
        ctype = draw(st.sampled_from(["application/json", "text/json; charset=utf-8"]))
    elif encoding == "truncated":
        packed = msgpack.packb(body, use_bin_type=True)
        content, ctype = (
            packed[: draw(st.integers(0, max(0, len(packed) - 1)))],
            "application/msgpack",
        )
    elif encoding == "raw":
        content = draw(st.binary(max_size=200))
        ctype = draw(st.sampled_from(["application/msgpack", "application/json", "text/plain", ""]))
    else:
        content, ctype = b"", ""
    return {
        "method": method,
        "url": path,
        "params": params,
        "content": content,
        "headers": {
            "content-type": ctype,
            "accept": draw(st.sampled_from(["application/msgpack", "application/json", "*/*"])),
        },
    }


def test_fuzzed_requests_on_every_route_never_get_a_5xx(
    client: httpx.Client, srv: ServerProcess
) -> None:
    table = route_table(srv.url)
    sent = []

    @settings(
        max_examples=400,
        deadline=None,
        derandomize=False,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(requests(table))
    def fuzz(req: dict[str, Any]) -> None:
        sent.append(req["method"])
        check(client.request(**req), req)

    fuzz()
    print(f"fuzz: routes={len(table)} requests={len(sent)}")


# -- the cases a fuzzer rarely reaches ---------------------------------------------------------


def test_truncated_msgpack_at_every_length(client: httpx.Client) -> None:
    body = msgpack.packb(
        {"items": [{"payload": b"\x01" * 40, "key": "k", "priority": 1.5}]}, use_bin_type=True
    )
    for n in range(len(body)):
        r = client.post(
            "/v1/namespaces/default/queues/trunc/invocations",
            content=body[:n],
            headers={"content-type": "application/msgpack"},
        )
        check(r, n)
        assert r.status_code == 400 or n == 0, (n, r.status_code)


def test_deeply_nested_bodies(client: httpx.Client) -> None:
    depth = 100_000
    for content, ctype in (
        (b"\x91" * depth + b"\xc0", "application/msgpack"),
        (b"\x81\xa1a" * depth + b"\xc0", "application/msgpack"),
        (b"[" * depth + b"]" * depth, "application/json"),
        (b'{"a":' * depth + b"1" + b"}" * depth, "application/json"),
    ):
        r = client.post(
            "/v1/namespaces/default/queues/deep/invocations",
            content=content,
            headers={"content-type": ctype},
        )
        check(r, content[:10])
        assert r.status_code == 400


def _raw(srv: ServerProcess, head: str, body_parts: list[bytes]) -> tuple[bytes, float]:
    """Send a request by hand, body in parts; return what came back and how fast."""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        start = time.monotonic()
        sock.sendall(head.encode())
        for part in body_parts:
            try:
                sock.sendall(part)
            except OSError:
                break  # the server answered and closed: it stopped reading, as it should
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        return data, time.monotonic() - start


def test_oversized_bodies_are_refused_before_they_are_read_whole(srv: ServerProcess) -> None:
    path = "/v1/namespaces/default/queues/big/invocations"
    auth = f"authorization: Bearer {srv.token}\r\ncontent-type: application/msgpack\r\n"
    # Declared: 10 GB announced, 64 KiB sent, the answer comes without waiting for the rest.
    head = f"POST {path} HTTP/1.1\r\nhost: x\r\n{auth}content-length: {10 * 2**30}\r\n\r\n"
    data, took = _raw(srv, head, [b"\x00" * 65536])
    assert data.startswith(b"HTTP/1.1 413"), data[:200]
    assert took < 5
    # Streamed: chunked, no length; the server stops at the limit, the body never ends.
    head = f"POST {path} HTTP/1.1\r\nhost: x\r\n{auth}transfer-encoding: chunked\r\n\r\n"
    chunk = b"\x00" * 65536
    parts = [b"%x\r\n" % len(chunk) + chunk + b"\r\n"] * (LIMIT_MB * 16 + 8)
    data, took = _raw(srv, head, parts)
    assert data.startswith(b"HTTP/1.1 413"), data[:200]


@pytest.mark.parametrize(
    ("method", "path", "body", "params", "status"),
    [
        ("POST", "/queues", {"name": "Bad_Name"}, None, 400),
        ("POST", "/queues", {"name": "ok-name", "kind": "lifo"}, None, 400),
        ("POST", "/queues/UPPER/invocations", {"payload": b"x"}, None, 400),
        ("POST", "/queues/q/invocations", {"payload": b"x", "timeout_s": -1}, None, 400),
        ("POST", "/queues/q/invocations", {"payload": b"x", "max_attempts": 0}, None, 400),
        ("POST", "/queues/q/invocations", {"payload": b"x", "priority": float("nan")}, None, 400),
        ("POST", "/queues/q/invocations", {"payload": "not bytes"}, None, 400),
        ("POST", "/queues/q/invocations", {"payload": b"x"}, {"wait": "soon"}, 400),
        ("GET", "/queues/q/count", None, {"state": "sleeping"}, 400),
        ("GET", "/invocations/01J0000000000000000000000Z", None, None, 404),
        ("GET", "/invocations/not-an-id", None, {"wait": "-5"}, 400),
        ("GET", "/invocations/01J0000000000000000000000Z/frames", None, {"since": "x"}, 400),
        ("GET", "/topics/q/t/frames", None, {"since": "1e999"}, 400),
        ("POST", "/claims", {"worker": "w", "lease_s": 0}, None, 400),
        ("POST", "/claims", {"worker": "w", "kind": "random"}, None, 400),
        ("POST", "/claims", {"worker": "w", "wait": "forever"}, None, 400),
        ("POST", "/invocations/01J0000000000000000000000Z/ack", {"lease": "x"}, None, 404),
        ("POST", "/leases/renew", {"leases": "x"}, None, 400),
        ("POST", "/workers/nobody/state", {"state": "dead"}, None, 400),
        (
            "POST",
            "/invocations/01J0000000000000000000000Z/end",
            {"lease": "x", "state": "succeeded"},
            None,
            404,
        ),
    ],
)
def test_named_bad_inputs(
    client: httpx.Client, method: str, path: str, body: Any, params: Any, status: int
) -> None:
    r = client.request(
        method,
        f"/v1/namespaces/default{path}",
        params=params,
        content=msgpack.packb(body, use_bin_type=True) if body is not None else None,
        headers={"content-type": "application/msgpack"},
    )
    check(r, (method, path))
    assert r.status_code == status, (r.status_code, msgpack.unpackb(r.content))
