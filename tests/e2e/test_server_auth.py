"""Who may call what: 401 without a known token, 403 outside the org, 404 for no namespace; and
within a namespace, 403 for a token without the scope a route (or a payload) needs."""

from __future__ import annotations

import datetime as dt
import json
import math
import pickle
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import msgpack
import pytest
from click.testing import CliRunner

import dreamlake.lakeshore as dls
from dreamlake.lakeshore import codec
from dreamlake.lakeshore.cli.main import cli
from dreamlake.lakeshore.envelope import Envelope
from dreamlake.lakeshore.errors import Forbidden
from dreamlake.lakeshore.plane import HttpDispatch
from dreamlake.lakeshore.plane.auth import DEFAULT_SCOPES, JOB, SCOPES
from dreamlake.lakeshore.plane.dispatch import open_store
from tests.support import claiming
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


# -- token scopes (docs/security.md): each scope opens its routes and no other -----------------

#: Tokens of one namespace by what they hold (None: created without scopes, the default set).
SCOPED: dict[str, tuple[str, ...] | None] = {
    "none": (),  # it may ask who it is, nothing more
    "read": ("read",),
    "submit-data": ("submit-data",),
    "submit-code": ("submit-code",),
    "work": ("work",),
    "manage": ("manage",),
    "admin": ("admin",),
    "data": ("submit-data", "read"),  # a producer that sends data, not code
    "code": ("submit-code", "read"),
    "default": None,
}
FILL = {
    "{queue}": "q",
    "{name}": "q",
    "{id}": "01J0000000000000000000000Z",
    "{ref}": "w",
    "{topic}": "t",
    "{digest}": "0123456789ab",  # the admin routes: no token's digest starts with it (404)
}


@dataclass(frozen=True)
class Scoped:
    namespace: str
    tokens: dict[str, str]  # SCOPED's names -> a token of the namespace holding those scopes


@pytest.fixture
def scoped(server, make_tenant) -> Scoped:
    ns = make_tenant(prefix="scopes").namespace
    store = open_store(server.store_path)
    try:
        tokens = {
            name: store.create_token(ns, label=name, scopes=scopes)
            for name, scopes in SCOPED.items()
        }
    finally:
        store.close()
    return Scoped(ns, tokens)


def _opens(held: tuple[str, ...] | None, needed: list[str]) -> bool:
    have = set(DEFAULT_SCOPES if held is None else held)
    if "submit-code" in have:
        have.add("submit-data")  # submit-code includes submit-data
    return bool(have & set(needed))


def test_every_route_with_a_token_names_the_scopes_that_open_it(server):
    doc = httpx.get(f"{server.url}/openapi.json").json()
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if op.get("security") == [] or path == "/v1/whoami":  # no token / any token
                continue
            scopes = op.get("x-lakeshore-scopes")
            # `job` opens a route to a running job's own token (no stored token holds it)
            assert scopes and set(scopes) <= {*SCOPES, JOB}, (method.upper(), path, scopes)


def test_the_scope_matrix_on_every_route(server, raw, scoped):
    """Given one token per scope (and a few sets), each route answers 403, naming the scope it
    needs and the scopes the token holds, to exactly the tokens without one of its scopes; the
    others get past auth (whatever the route then says about the empty body)."""
    doc = httpx.get(f"{server.url}/openapi.json").json()
    refused = passed = 0
    for template, item in doc["paths"].items():
        path = template.replace("{ns}", scoped.namespace)
        for key, value in FILL.items():
            path = path.replace(key, value)
        for method, op in item.items():
            needed = op.get("x-lakeshore-scopes")
            if not needed:
                continue
            for name, held in SCOPED.items():
                body = {} if method in ("post", "patch") else None
                status, answer = raw.call(method.upper(), path, body, token=scoped.tokens[name])
                where = (method.upper(), template, name, status, answer)
                if _opens(held, needed):
                    assert status not in (401, 403) and status < 500, where
                    passed += 1
                    continue
                assert status == 403 and answer["error"]["code"] == "forbidden", where
                message = answer["error"]["message"]
                wanted = " or ".join(f"'{s}'" for s in needed) + " scope"
                assert wanted in message or "an admin token" in message, where
                have = DEFAULT_SCOPES if held is None else held
                shown = ", ".join(s for s in SCOPES if s in have) or "none"
                assert f"this token's scopes: {shown}" in message, where
                refused += 1
    print(f"scope matrix: refused={refused} passed={passed}")
    assert refused > 150 and passed > 100, (refused, passed)


def test_whoami_shows_the_scopes(raw, scoped):
    status, me = raw.call("GET", "/v1/whoami", token=scoped.tokens["none"])
    assert status == 200 and me["scopes"] == [] and me["namespace"] == scoped.namespace
    _, me = raw.call("GET", "/v1/whoami", token=scoped.tokens["default"])
    assert me["scopes"] == ["read", "submit-data", "submit-code", "work", "manage"]


# -- submit-data: plain values and raw envelopes only, whatever the bytes say ------------------


class Booby:
    """Unpickling this writes `marker` (it reduces to `exec` of a line: no import needed)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (exec, (f"open({self.marker!r}, 'w').write('ran')",))


def _ext(code: int, value: Any) -> msgpack.ExtType:
    data = value if isinstance(value, bytes) else msgpack.packb(value, use_bin_type=True)
    return msgpack.ExtType(code, data)


def _hostile(marker: Path) -> dict[str, bytes]:
    """Payloads that would run code on a worker, built by hand as a raw HTTP client would (no
    SDK in the way); each one's unpickling or command writes `marker`."""
    booby = pickle.dumps(Booby(str(marker)))
    thunk = _ext(32, booby)
    two_kinds = b"".join(  # {kind: raw, kind: thunk, pickle: ...}: a dict keeps the last kind
        msgpack.packb(x, use_bin_type=True) for x in ("kind", "raw", "kind", "thunk", "pickle")
    )
    two_kinds = b"\x83" + two_kinds + msgpack.packb(booby, use_bin_type=True)
    return {
        "thunk": msgpack.packb(thunk),
        "thunk nested in a dict": msgpack.packb({"x": [1, {"y": thunk}]}),
        "thunk in a tuple in a raw envelope": msgpack.packb(
            _ext(33, {"kind": "raw", "value": _ext(1, [1, _ext(1, [thunk])])})
        ),
        "udf envelope": msgpack.packb(_ext(33, {"kind": "udf", "name": "f", "pickle": booby})),
        "exec envelope": msgpack.packb(_ext(33, {"kind": "exec", "command": f"touch {marker}"})),
        "envelope naming two kinds": msgpack.packb(msgpack.ExtType(33, two_kinds)),
        "spilled payload": msgpack.packb(
            _ext(49, {"id": "0" * 26, "size": 1, "digest": "0" * 32, "spilled": True})
        ),
    }


def _plain() -> dict[str, bytes]:
    return {
        "dict": codec.encode({"x": 1, "name": "Ça va", "pi": 3.14}),
        "tuple, set, datetime, uuid, bigint": codec.encode(
            ((1, 2), {3}, dt.datetime(2026, 1, 1), uuid.UUID(int=7), 2**80)
        ),
        "raw envelope": codec.encode(Envelope(kind="raw", value={"x": [1, (2, 3)]})),
        "a storage ref passed on purpose": msgpack.packb(
            _ext(48, {"url": "file:///data", "key": "datasets/train.parquet", "size": 1})
        ),
    }


def test_a_data_only_token_cannot_send_code(raw, scoped, tmp_path):
    """Given a token with submit-data and read, when it submits code by raw HTTP (a thunk,
    one nested in a dict or in a tuple inside a raw envelope, a udf call, a shell command),
    then each submit is 403 naming submit-code and the token's scopes, a batch holding one is
    refused whole, and nothing was queued."""
    data = scoped.tokens["data"]
    base = f"/v1/namespaces/{scoped.namespace}"
    submit = f"{base}/queues/guarded/invocations"
    marker = tmp_path / "ran"
    for name, payload in _hostile(marker).items():
        status, err = raw.call("POST", submit, {"payload": payload}, token=data)
        assert status == 403, (name, status, err)
        message = err["error"]["message"]
        assert message.startswith("the payload carries"), (name, message)
        assert "'submit-code' scope" in message and "scopes: read, submit-data" in message
        batch = {"items": [{"json": 1}, {"payload": payload}]}
        status, err = raw.call("POST", submit, batch, token=data)
        assert status == 403 and "item 1's payload" in err["error"]["message"], (name, err)
        status, err = raw.call("POST", f"{submit}?result_wait=1", {"payload": payload}, token=data)
        assert status == 403, (name, err)
    assert raw.call("GET", f"{base}/queues/guarded/count", token=data)[1] == {"count": 0}
    assert not marker.exists()


def test_a_data_only_token_sends_plain_values_and_raw_envelopes(raw, scoped, tmp_path):
    data, code = scoped.tokens["data"], scoped.tokens["code"]
    submit = f"/v1/namespaces/{scoped.namespace}/queues/plain/invocations"
    for name, payload in _plain().items():
        status, body = raw.call("POST", submit, {"payload": payload}, token=data)
        assert status == 201, (name, status, body)
    big = {"json": {"big": 2**70, "s": "x"}}  # a JSON producer's value, encoded by the server
    assert raw.call("POST", submit, big, token=data, as_json=True)[0] == 201
    # the same hostile bytes are accepted from a token trusted with code (they are not run here)
    for name, payload in _hostile(tmp_path / "never").items():
        assert raw.call("POST", submit, {"payload": payload}, token=code)[0] == 201, name


def test_what_the_check_cannot_read_is_a_400_for_a_data_only_token(raw, scoped):
    submit = f"/v1/namespaces/{scoped.namespace}/queues/odd/invocations"
    deep: Any = 1
    for _ in range(100):
        deep = _ext(1, [deep])
    cases = {
        "nested too deeply": msgpack.packb(deep),
        "ext type 99": msgpack.packb(_ext(99, b"")),
        "unknown kind 'weird'": msgpack.packb(_ext(33, {"kind": "weird"})),
        "not msgpack": msgpack.packb([1]) + b"\xd4",
    }
    for words, payload in cases.items():
        status, err = raw.call("POST", submit, {"payload": payload}, token=scoped.tokens["data"])
        assert status == 400 and err["error"]["code"] == "invalid_argument", (words, err)
        assert err["error"]["message"].startswith("the payload: "), err
        assert words.split()[0] in err["error"]["message"], (words, err)


def test_topic_values_carrying_code_need_submit_code(raw, scoped, tmp_path):
    post = f"/v1/namespaces/{scoped.namespace}/topics/q/news/frames"
    thunk = _hostile(tmp_path / "ran")["thunk nested in a dict"]
    for name in ("data", "work"):
        token = scoped.tokens[name]
        status, err = raw.call("POST", post, {"kind": "VALUE", "value": thunk}, token=token)
        assert status == 403 and "the topic value carries a thunk" in err["error"]["message"]
        plain = {"kind": "VALUE", "value": codec.encode({"ok": 1})}
        assert raw.call("POST", post, plain, token=token)[0] == 201
    value = {"kind": "VALUE", "value": thunk}  # for listeners that opt in to pickles
    assert raw.call("POST", post, value, token=scoped.tokens["code"])[0] == 201


# -- the SDK and the CLI with scoped tokens ----------------------------------------------------


def _answer(payload: Any) -> Any:
    return {"echo": payload}


def test_the_sdk_with_a_producer_token_and_a_worker_token(server, scoped):
    """A data producer (submit-data, read) and a worker (work only) run a job end to end; each
    is refused what it lacks, with the scope named."""
    ns = scoped.namespace
    with (
        HttpDispatch(server.url, token=scoped.tokens["data"], namespace=ns) as producer,
        HttpDispatch(server.url, token=scoped.tokens["work"], namespace=ns) as worker,
    ):
        q = dls.SyncQueue("sdk-scopes", dispatch=producer)
        inv = q.submit({"x": 2})
        with pytest.raises(Forbidden, match=r"carries a thunk.*'submit-code' scope"):
            q.submit(dls.thunk(math.sqrt, 4.0))
        with pytest.raises(Forbidden, match="'work' scope"):
            claiming.claim(producer, ["sdk-scopes"], worker="not-me")
        ran = dls.run_worker(worker, ["sdk-scopes"], once=True, handler=_answer)
        assert ran == 1
        assert q.result(inv, timeout=30) == {"echo": {"x": 2}}
        with pytest.raises(Forbidden, match="'read' scope"):
            worker.invocation(inv)
        with pytest.raises(Forbidden, match="'submit-data' scope"):
            dls.SyncQueue("sdk-scopes", dispatch=worker).submit({"x": 3})


def test_tokens_create_with_scopes_and_ls_shows_them(server, raw):
    runner = CliRunner()
    store = ["--store", str(server.store_path)]
    created = runner.invoke(
        cli,
        [
            "tokens",
            "create",
            "-n",
            "cli-scopes",
            "--scope",
            "submit-data",
            "--scope",
            "read",
            "--label",
            "producer",
            *store,
        ],
    )
    assert created.exit_code == 0, created.output
    token = created.output.strip()
    assert token.startswith("lks_")
    listed = runner.invoke(cli, ["tokens", "ls", "--json", *store])
    rows = [r for r in json.loads(listed.output) if r["label"] == "producer"]
    assert [(r["namespace"], r["scopes"], r["admin"]) for r in rows] == [
        ("cli-scopes", ["read", "submit-data"], False)
    ]
    table = runner.invoke(cli, ["tokens", "ls", *store], env={"COLUMNS": "200"})
    assert "read submit-data" in table.output and "scopes" in table.output
    bad = runner.invoke(cli, ["tokens", "create", "-n", "cli-scopes", "--scope", "root", *store])
    assert bad.exit_code == 2 and "'root' is not one of" in bad.output
    assert "Traceback" not in bad.output
    status, me = raw.call("GET", "/v1/whoami", token=token)
    assert status == 200 and me["scopes"] == ["read", "submit-data"]
