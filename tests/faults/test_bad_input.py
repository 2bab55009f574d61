"""Bad input on every route: property-based fuzzing from the served OpenAPI document, plus the
cases a fuzzer rarely finds (truncated msgpack, deep nesting, bodies past the limit sent slowly),
and the number, string and unicode edges (NUL, lone surrogates, 2**63, -2**63-1, 1e309, NaN,
300-character names) in every field, query parameter and path segment the document names.

Every test runs against a server on each store: SQLite, and Postgres (whose text cannot hold
NUL; skipped without a server, failed under CI=true).

The rule under test: never a 5xx for anything a client sent; every 4xx carries a message; and a
text field holding NUL or a lone surrogate is refused, never stored.
"""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from procs import ServerProcess

from tests.support.postgres import postgres_schema

pytestmark = pytest.mark.slow

LIMIT_MB = 1
WEIRD = [
    "",
    " ",
    "..",
    "%2e%2e",
    "a" * 300,
    "UPPER",
    "ü",
    "-lead",
    "x y",
    "null",
    "0",
    "q\x00",
    "q\ud800",
    str(2**63),
    "d\u0435fault",  # Cyrillic e
]
#: The edges of numbers, strings and unicode that a database or a wire chokes on.
TEXT_EDGES: list[Any] = ["\x00", "a\x00b", "\ud800", "a\udcffb", "n" * 300, "\u00e9" * 300]
NUMBER_EDGES: list[Any] = [2**63, -(2**63) - 1, 2**64, 10**30, float("inf"), float("nan")]
QUERY_EDGES = [str(2**63), str(-(2**63) - 1), "1e309", "nan", "\x00", "\ud800", "x" * 300]


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def srv(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp(f"fuzz-{request.param}")
    args = ["--max-body-mb", str(LIMIT_MB)]
    if request.param == "sqlite":
        with ServerProcess(home, args=args) as s:
            yield s
        return
    with postgres_schema("lakeshore_fuzz") as url, ServerProcess(home, url, args=args) as s:
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


def segment(value: str) -> str:
    """A path segment as percent-encoded UTF-8 (a lone surrogate as the bytes it would be)."""
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


def query(params: dict[str, str]) -> str:
    if not params:
        return ""
    pairs = [(k, v.encode("utf-8", "surrogatepass")) for k, v in params.items()]
    return "?" + urlencode(pairs)


def packable(body: Any) -> bytes | None:
    try:
        return msgpack.packb(body, use_bin_type=True)  # type: ignore[no-any-return]
    except (OverflowError, UnicodeEncodeError, ValueError, TypeError):
        return None


# -- property-based: every documented route ------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(),
    st.text(max_size=40),
    st.binary(max_size=40),
    st.sampled_from(TEXT_EDGES + NUMBER_EDGES),
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
        path = path.replace(param, segment(value) or "x", 1)
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
            st.text(max_size=12) | st.sampled_from(QUERY_EDGES),
            max_size=3,
        )
    )
    encoding = draw(st.sampled_from(["msgpack", "json", "raw", "truncated", "none"]))
    if encoding in ("msgpack", "truncated") and packable(body) is None:
        encoding = "json"  # past 64 bits, or a lone surrogate: only JSON can say it
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
        "url": path + query(params),
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


# -- schema-driven edges: every field, query parameter and path segment the document names --------


def _resolve(schema: dict[str, Any], schemas: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    return _resolve(schemas[ref.rsplit("/", 1)[-1]], schemas) if ref else schema


def _shapes(schema: dict[str, Any], schemas: dict[str, Any]) -> list[dict[str, Any]]:
    """The object schemas a body may take (oneOf / anyOf each count)."""
    schema = _resolve(schema, schemas)
    options = schema.get("oneOf") or schema.get("anyOf")
    if options:
        return [shape for option in options for shape in _shapes(option, schemas)]
    return [schema] if schema.get("type") == "object" else []


def _plausible(prop: dict[str, Any]) -> Any:
    """A value of the property's type, for the fields beside the one under test."""
    kind = prop.get("type")
    if prop.get("format") == "byte":
        return b"\xc0"
    return {"string": "fuzz", "integer": 1, "number": 1.0, "boolean": False}.get(str(kind))


def _edges_for(prop: dict[str, Any]) -> list[Any]:
    kind = prop.get("type")
    if kind == "string" and prop.get("format") != "byte":
        return [*TEXT_EDGES, 2**63]
    if kind in ("integer", "number"):
        return [*NUMBER_EDGES, "\x00"]
    return [TEXT_EDGES[0], TEXT_EDGES[2], NUMBER_EDGES[1], NUMBER_EDGES[4]]


def edge_bodies(
    shape: dict[str, Any], schemas: dict[str, Any]
) -> Iterator[tuple[str, dict[str, Any], Any, bool]]:
    """(field, body, edge, is text) with one edge in one field, the rest plausible.

    An array of objects (a batch's `items`) gets the edge inside its one item.
    """
    props = shape.get("properties", {})
    base = {name: _plausible(_resolve(p, schemas)) for name, p in props.items()}
    base = {k: v for k, v in base.items() if v is not None}
    for name, raw in props.items():
        prop = _resolve(raw, schemas)
        inner = _resolve(prop.get("items", {}), schemas) if prop.get("type") == "array" else {}
        if inner.get("type") == "object":
            for item_field, body, edge, text in edge_bodies(inner, schemas):
                yield f"{name}[0].{item_field}", {**base, name: [body]}, edge, text
            continue
        text = prop.get("type") == "string" and prop.get("format") != "byte"
        for edge in _edges_for(prop):
            yield name, {**base, name: edge}, edge, text


def _send_edge(client: httpx.Client, method: str, url: str, body: dict[str, Any]) -> list[Any]:
    """The body as JSON (which says every edge) and as msgpack where msgpack can carry it."""
    answers = []
    text = json.dumps(body, default=lambda b: base64.b64encode(b).decode())
    answers.append(
        client.request(method, url, content=text, headers={"content-type": "application/json"})
    )
    packed = packable(body)
    if packed is not None:
        answers.append(
            client.request(
                method, url, content=packed, headers={"content-type": "application/msgpack"}
            )
        )
    return answers


def _bad_text(edge: Any) -> bool:
    return isinstance(edge, str) and any(c == "\x00" or 0xD800 <= ord(c) < 0xE000 for c in edge)


def _refused(r: httpx.Response) -> bool:
    """A 4xx, or a batch's 2xx whose one item carries its error (`acks`: {errors: [...]})."""
    if r.status_code >= 400:
        return True
    body = r.json() if "json" in r.headers.get("content-type", "") else msgpack.unpackb(r.content)
    errors = body.get("errors") if isinstance(body, dict) else None
    return bool(errors) and all(e is not None for e in errors)


def _fields(client: httpx.Client, method: str, url: str, op: dict[str, Any], schemas: Any) -> int:
    media = op.get("requestBody", {}).get("content", {}).get("application/json", {})
    sent = 0
    for shape in _shapes(media.get("schema", {}), schemas):
        for field, body, edge, text in edge_bodies(shape, schemas):
            if field == "wait" and type(edge) is int and edge > 0:
                # A claim waiting 2**63 s is valid (the server holds it to its cap): reached
                # now that its other fields are plausible (`kind` is an enum), not an edge.
                continue
            for r in _send_edge(client, method, url, body):
                sent += 1
                check(r, (method, url, field, repr(edge)[:40]))
                if text and _bad_text(edge):  # never stored: refused, naming what was wrong
                    assert _refused(r), (method, url, field, repr(edge)[:40], r.content[:200])
    return sent


def _parameters(client: httpx.Client, method: str, path: str, op: dict[str, Any]) -> int:
    sent = 0
    for param in op.get("parameters", []):
        name = param["name"]
        if param["in"] == "query":
            # A wait of 2**63 s is valid (the server holds it to its cap): not an edge here.
            waits = name in ("wait", "result_wait")
            for edge in [e for e in QUERY_EDGES if not (waits and e == str(2**63))]:
                r = client.request(method, _fill(path) + query({name: edge}))
                check(r, (method, path, name, edge[:40]))
                sent += 1
        elif name != "ns":
            for edge in WEIRD:
                r = client.request(
                    method, _fill(path.replace("{" + name + "}", segment(edge) or "x"))
                )
                check(r, (method, path, name, edge[:40]))
                sent += 1
    return sent


def _fill(path: str) -> str:
    path = path.replace("{ns}", "default")
    return "/".join("fuzz-x" if p.startswith("{") else p for p in path.split("/"))


def test_every_documented_field_query_and_path_refuses_the_edges(
    client: httpx.Client, srv: ServerProcess
) -> None:
    doc = httpx.get(f"{srv.url}/openapi.json").json()
    schemas = doc.get("components", {}).get("schemas", {})
    sent = 0
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method in ("get", "post", "patch", "delete", "put"):
                sent += _fields(client, method.upper(), _fill(path), op, schemas)
                sent += _parameters(client, method.upper(), path, op)
    print(f"edges: {sent} requests")
    assert sent > 500


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
