"""The admin routes (namespaces, orgs, tokens over HTTP) and token expiry, against a real
`lakeshore server`; and `lakeshore tokens` / `lakeshore namespaces` with --url."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from datetime import datetime

import pytest

from dreamlake.lakeshore.errors import Forbidden, Unauthorized
from dreamlake.lakeshore.plane.admin import HttpAdmin
from dreamlake.lakeshore.plane.dispatch import open_store
from tests.support.client import Api
from tests.support.daemons import wait_until
from tests.support.server import LAUNCH, server_env

ADMIN_ROUTES = [
    ("GET", "/v1/admin/namespaces", None),
    ("POST", "/v1/admin/namespaces", {"name": "nope"}),
    ("GET", "/v1/admin/orgs", None),
    ("GET", "/v1/admin/tokens", None),
    ("POST", "/v1/admin/tokens", {"namespace": "nope"}),
    ("DELETE", "/v1/admin/tokens/0123456789ab", None),
]


@pytest.fixture
def raw(server):
    client = Api(server.url, None)
    yield client
    client.close()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_ROUTES)
def test_a_token_without_the_admin_scope_gets_403_naming_it(raw, tenant, method, path, body):
    """Given a namespace token holding every namespace scope but admin, each admin route is 403,
    naming the admin scope and the token's scopes; and nothing was created."""
    status, err = raw.call(method, path, body, token=tenant.token)
    assert status == 403 and err["error"]["code"] == "forbidden", (status, err)
    message = err["error"]["message"]
    assert "'admin' scope" in message, message
    assert "this token's scopes: read, submit-data, submit-code, work, manage" in message


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_ROUTES)
def test_no_token_is_401_on_the_admin_routes(raw, method, path, body):
    assert raw.call(method, path, body, token=None)[0] == 401


def test_namespaces_orgs_and_tokens_over_http(server, raw):
    """Given the server's admin token, when it makes a namespace in an org and a scoped token
    for it, then the namespace and org are listed, the token works with exactly its scopes,
    `tokens` lists it without the secret, and once revoked it is 401."""
    admin = server.token
    ns, org = _name("adm"), _name("org")
    status, row = raw.call("POST", "/v1/admin/namespaces", {"name": ns, "org": org}, token=admin)
    assert status == 201 and (row["name"], row["org"]) == (ns, org)
    status, body = raw.call("GET", "/v1/admin/namespaces", token=admin)
    assert status == 200 and {"name": ns, "org": org} in [
        {"name": r["name"], "org": r["org"]} for r in body["namespaces"]
    ]
    status, body = raw.call("GET", "/v1/admin/orgs", token=admin)
    assert {"name": org, "namespaces": [ns]} in body["orgs"]

    create = {"namespace": ns, "label": "team", "scopes": ["read", "submit-data"]}
    status, made = raw.call("POST", "/v1/admin/tokens", create, token=admin)
    assert status == 201, made
    secret = made["token"]
    assert secret.startswith("lks_") and made["scopes"] == ["read", "submit-data"]
    assert (made["namespace"], made["org"], made["admin"], made["expires_at"]) == (
        ns,
        org,
        False,
        None,
    )
    status, me = raw.call("GET", "/v1/whoami", token=secret)
    assert status == 200 and me["scopes"] == ["read", "submit-data"] and me["namespace"] == ns
    assert raw.call("GET", "/v1/admin/tokens", token=secret)[0] == 403

    status, body = raw.call("GET", "/v1/admin/tokens", token=admin)
    (listed,) = [r for r in body["tokens"] if r["hash"] == made["hash"]]
    assert listed["label"] == "team" and listed["expires_at"] is None
    assert secret not in json.dumps(body)

    status, gone = raw.call("DELETE", f"/v1/admin/tokens/{made['hash']}", token=admin)
    assert status == 200 and gone["namespace"] == ns
    wait_until(  # the server's grant cache forgets it within GRANT_TTL_S
        lambda: raw.call("GET", "/v1/whoami", token=secret)[0] == 401,
        timeout=15,
        what="the revoked token to be refused",
    )


def test_bad_admin_input_is_one_400_naming_the_field(raw, server):
    admin = server.token
    cases = [
        ({"namespace": "x", "scopes": ["root"]}, "unknown token scope 'root'"),
        ({"namespace": "x", "expires_in_s": -1}, "expires_in_s must be a number of seconds"),
        ({"namespace": "x", "expires_in_s": "1d"}, "field 'expires_in_s' must be a number"),
        ({"namespace": "Bad Name"}, "namespace"),
        ({"namespace": "x", "colour": "red"}, "unknown field(s) 'colour'"),
        ({}, "missing field 'namespace'"),
    ]
    for body, words in cases:
        status, err = raw.call("POST", "/v1/admin/tokens", body, token=admin)
        assert status == 400 and words in err["error"]["message"], (body, status, err)
    status, err = raw.call("DELETE", "/v1/admin/tokens/xyz", token=admin)
    assert status == 400 and "8 hex digits" in err["error"]["message"]
    status, err = raw.call("DELETE", "/v1/admin/tokens/ffffffffffff", token=admin)
    assert status == 404


def test_an_expired_token_gets_401_saying_when_it_expired(server, raw):
    """Given a token made to live one second, when it is used: first it works (and is cached
    by the server), then, once its second is over, every request is 401 with a message naming
    the expiry time and how to get a new token, though its grant is still cached."""
    status, made = raw.call(
        "POST",
        "/v1/admin/tokens",
        {"namespace": _name("exp"), "expires_in_s": 1},
        token=server.token,
    )
    assert status == 201 and made["expires_at"] is not None
    secret = made["token"]
    assert raw.call("GET", "/v1/whoami", token=secret)[0] == 200  # granted: now cached

    def refused() -> dict[str, str] | None:
        status, err = raw.call("GET", "/v1/whoami", token=secret)
        return err["error"] if status == 401 else None

    error = wait_until(refused, timeout=10, what="the token to expire")
    assert error["code"] == "unauthorized"
    assert error["message"].startswith("this token expired at 20"), error
    assert "ask an admin for a new one (lakeshore tokens create" in error["message"]
    # a namespaced route says the same, and listing shows the expiry
    status, err = raw.call("GET", f"/v1/namespaces/{made['namespace']}/queues", token=secret)
    assert status == 401 and "expired at" in err["error"]["message"]
    with HttpAdmin(server.url, token=server.token) as admin:
        (row,) = [r for r in admin.list_tokens() if r["hash"] == made["hash"]]
    assert row["expires_at"] == made["expires_at"]


def test_the_sdk_admin_client_raises_the_plane_errors(server, tenant):
    with (
        HttpAdmin(server.url, token=tenant.token) as admin,
        pytest.raises(Forbidden, match="'admin' scope"),
    ):
        admin.list_namespaces()
    with HttpAdmin(server.url, token="lks_nope") as admin, pytest.raises(Unauthorized):
        admin.list_tokens()


def _cli(server, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`lakeshore ARGS` as a separate process, against the server by --url (no store access:
    LAKESHORE_HOME points at an empty folder, so there is no token file either)."""
    environ = {**server_env(server.home / "cli-home"), "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", LAUNCH, *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_cli_over_url(server):
    """Given only a URL and an admin token (no store on this side), `namespaces add/ls/orgs`
    and `tokens create/ls/revoke` work through the server; `--expires-in 30d` shows in ls."""
    url = ["--url", server.url, "--token", server.token]
    ns, org = _name("cli"), _name("corp")
    added = _cli(server, "namespaces", "add", ns, "--org", org, *url)
    assert added.returncode == 0 and f"namespace {ns} (org {org})" in added.stdout, added.stderr
    listed = _cli(server, "namespaces", "ls", "--json", *url)
    assert {"name": ns, "org": org} in [
        {"name": r["name"], "org": r["org"]} for r in json.loads(listed.stdout)
    ]
    orgs = _cli(server, "namespaces", "orgs", "--json", *url)
    assert {"name": org, "namespaces": [ns]} in json.loads(orgs.stdout)

    made = _cli(
        server, "tokens", "create", "-n", ns, "--label", "ci", "--expires-in", "30d",
        "--scope", "read", *url,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    assert secret.startswith("lks_")
    rows = [r for r in json.loads(_cli(server, "tokens", "ls", "--json", *url).stdout)]
    (row,) = [r for r in rows if r["namespace"] == ns]
    assert row["scopes"] == ["read"] and row["label"] == "ci"
    lifetime = datetime.fromisoformat(row["expires_at"]) - datetime.fromisoformat(row["created_at"])
    assert 29.9 * 86400 < lifetime.total_seconds() <= 30 * 86400  # --json times are ISO 8601
    table = _cli(server, "tokens", "ls", "--wide", *url).stdout  # the dates are --wide
    assert row["hash"] in table and "never" in table  # the admin token never expires

    revoked = _cli(server, "tokens", "revoke", row["hash"], *url)
    assert revoked.returncode == 0 and f"revoked {row['hash']} ({ns}, ci)" in revoked.stdout
    again = _cli(server, "tokens", "revoke", row["hash"], *url)
    assert again.returncode == 1 and "no token's digest starts with" in again.stderr
    assert "Traceback" not in again.stderr


def test_namespaces_ls_shows_created_as_a_time_and_json_keeps_iso_8601(server):
    """The table reads as `queues ls` and `jobs ls` do (local time to the second), never a raw
    epoch float; --json keeps the exact instant, ISO 8601 as every listing's."""
    url = ["--url", server.url, "--token", server.token]
    ns, org = _name("when"), _name("corp")
    assert _cli(server, "namespaces", "add", ns, "--org", org, *url).returncode == 0

    table = _cli(server, "namespaces", "ls", *url)
    listed = _cli(server, "namespaces", "ls", "--json", *url)

    assert table.returncode == 0, table.stderr
    (row,) = [r for r in json.loads(listed.stdout) if r["name"] == ns]
    created = datetime.fromisoformat(row["created_at"])
    assert created.utcoffset() is not None and created.microsecond % 1000 == 0  # to the ms
    header, *lines = table.stdout.splitlines()
    assert header.split() == ["name", "org", "created"]
    (line,) = [line.split() for line in lines if line.split()[0] == ns]
    shown = created.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    assert line == [ns, org, *shown.split()], table.stdout


def test_the_cli_mutations_print_what_changed_as_json(server):
    """`namespaces add`, `tokens create` and `tokens revoke` take --json, as `queues rm` does:
    the row as the listings show it (ISO 8601 times), the secret once, the revoked digest."""
    url = ["--url", server.url, "--token", server.token]
    ns, org = _name("json"), _name("corp")

    added = _cli(server, "namespaces", "add", ns, "--org", org, "--json", *url)
    assert added.returncode == 0, added.stderr
    row = json.loads(added.stdout)
    assert (row["name"], row["org"]) == (ns, org)
    datetime.fromisoformat(row["created_at"])

    made = _cli(
        server, "tokens", "create", "-n", ns, "--label", "ci", "--scope", "read",
        "--expires-in", "1d", "--json", *url,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    token = json.loads(made.stdout)
    assert token["token"].startswith("lks_")
    assert (token["namespace"], token["label"], token["scopes"]) == (ns, "ci", ["read"])
    assert token["admin"] is False
    lifetime = datetime.fromisoformat(token["expires_at"]) - datetime.fromisoformat(
        token["created_at"]
    )
    assert abs(lifetime.total_seconds() - 86400) < 0.01  # ISO times carry milliseconds
    listed = json.loads(_cli(server, "tokens", "ls", "--json", *url).stdout)
    assert [r for r in listed if r["hash"] == token["hash"]] == [
        {k: v for k, v in token.items() if k != "token"}
    ]

    revoked = _cli(server, "tokens", "revoke", token["hash"], "--json", *url)
    assert revoked.returncode == 0, revoked.stderr
    assert json.loads(revoked.stdout) == {
        "hash": token["hash"], "namespace": ns, "label": "ci", "revoked": True
    }  # fmt: skip
    listed = json.loads(_cli(server, "tokens", "ls", "--json", *url).stdout)
    assert token["hash"] not in [r["hash"] for r in listed]


def test_the_cli_refuses_clearly(server, tenant):
    url = ["--url", server.url]
    denied = _cli(server, "tokens", "ls", *url, "--token", tenant.token)
    assert denied.returncode == 1 and "'admin' scope" in denied.stderr
    assert "Traceback" not in denied.stderr
    for bad in ("soon", "0", "-5m", "3y"):
        out = _cli(server, "tokens", "create", "-n", "x", "--expires-in", bad, *url)
        assert out.returncode == 2 and "--expires-in" in out.stderr, (bad, out.stderr)
    both = _cli(server, "tokens", "ls", *url, "--store", str(server.store_path))
    assert both.returncode == 2 and "--url and --store are both given" in both.stderr
    # a flag beats the environment: --store here, with LAKESHORE_URL set
    env = {"LAKESHORE_URL": "http://127.0.0.1:1"}
    local = _cli(server, "tokens", "ls", "--json", "--store", str(server.store_path), env=env)
    assert local.returncode == 0 and json.loads(local.stdout), local.stderr


def test_tokens_create_with_expiry_on_the_store(server):
    """Without --url the verbs open the store as before, --expires-in included."""
    ns = _name("local")
    store_flag = ["--store", str(server.store_path)]
    made = _cli(server, "tokens", "create", "-n", ns, "--expires-in", "90m", *store_flag)
    assert made.returncode == 0, made.stderr
    store = open_store(server.store_path)
    try:
        (row,) = [r for r in store.list_tokens() if r["namespace"] == ns]
    finally:
        store.close()
    assert row["expires_at"] == pytest.approx(row["created_at"] + 5400)
