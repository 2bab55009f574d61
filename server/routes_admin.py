"""The admin routes: namespaces, orgs and tokens, managed over HTTP.

Before these, a token could only be minted by a process that opened the database
(`lakeshore tokens create --store ...` on the control host), so an operator could not make one
for a new team against a remote control plane. They span every namespace and mint credentials,
so each needs the `admin` scope (the server's first token, or `tokens create --admin`), which the
endpoint checks before the handler runs, as on the fleet routes. The store does the work
(store/auth.py): these handlers only read the body and call it, so the CLI's two paths (the
store directly, or these routes) behave alike.

A created token's secret is in the answer once and nowhere else (the store keeps its digest).
"""

from __future__ import annotations

from typing import Any

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.plane import routes
from dreamlake.lakeshore.plane.auth import ADMIN, SCOPES
from dreamlake.lakeshore.plane.store.auth import MAX_LIFETIME_S

from .endpoint import Api, Call
from .openapi_parts import BOOL, NAME, NUM, STR, STRS, _nullable, _obj
from .openapi_schemas import SCHEMAS as _SCHEMAS


async def list_namespaces(call: Call) -> dict[str, Any]:
    return {"namespaces": await call.run(call.store.list_namespaces)}


async def add_namespace(call: Call) -> dict[str, Any]:
    b = call.body
    b.only("name", "org")
    name, org = b.req_text("name"), b.text("org")
    await call.run(call.store.add_namespace, name, org)
    row = await call.run(call.store.namespace, name)
    return dict(row or {"name": name, "org": org})


async def list_orgs(call: Call) -> dict[str, Any]:
    return {"orgs": await call.run(call.store.list_orgs)}


async def list_tokens(call: Call) -> dict[str, Any]:
    return {"tokens": await call.run(call.store.list_tokens)}


async def create_token(call: Call) -> dict[str, Any]:
    """Mint a token; the answer holds its secret (once) and the row `tokens ls` will show."""
    b = call.body
    b.only("namespace", "label", "org", "scopes", "admin", "expires_in_s")
    ns = b.req_text("namespace")
    scopes = b.str_list("scopes") if b.data.get("scopes") is not None else None
    secret = await call.run(
        call.store.create_token,
        ns,
        label=b.text("label") or "",
        org=b.text("org"),
        admin=b.boolean("admin"),
        scopes=scopes,
        expires_in_s=b.number("expires_in_s"),
    )
    return {"token": secret, **await call.run(call.store.describe_token, secret)}


async def revoke_token(call: Call) -> dict[str, Any]:
    digest = call.param("digest")
    if not digest:
        raise InvalidArgument("give at least 8 hex digits of the token's digest (tokens ls)")
    return await call.run(call.store.revoke_token, digest)


_ROWS = {"type": "array", "items": {"type": "object", "additionalProperties": True}}
_SCHEMAS.update(
    {
        "AdminNamespaces": _obj({"namespaces": _ROWS}),
        "AdminNamespaceCreate": _obj({"name": NAME, "org": _nullable(NAME)}, ("name",)),
        "AdminNamespace": _obj({"name": STR, "org": _nullable(STR), "created_at": NUM}),
        "AdminOrgs": _obj(
            {"orgs": {"type": "array", "items": _obj({"name": STR, "namespaces": STRS})}}
        ),
        "AdminTokens": _obj({"tokens": _ROWS}),
        "AdminTokenCreate": _obj(
            {
                "namespace": NAME,
                "label": STR,
                "org": _nullable(NAME),
                "scopes": {"type": "array", "items": {"enum": list(SCOPES)}},
                "admin": BOOL,
                "expires_in_s": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "maximum": MAX_LIFETIME_S,
                    "description": "seconds from now; absent: never",
                },
            },
            ("namespace",),
        ),
        "AdminTokenCreated": _obj(
            {
                "token": {**STR, "description": "the secret, shown once"},
                "hash": {**STR, "description": "its digest's prefix, as tokens ls shows it"},
                "namespace": STR,
                "org": _nullable(STR),
                "label": STR,
                "scopes": STRS,
                "admin": BOOL,
                "expires_at": _nullable(NUM),
            }
        ),
        "AdminTokenRevoked": _obj({"hash": STR, "namespace": STR, "label": STR}),
    }
)

ROUTES = [
    Api(
        routes.NAMESPACES,
        list_namespaces,
        "Admin: every namespace and its org",
        response="AdminNamespaces",
        scopes=(ADMIN,),
    ),
    Api(
        routes.ADD_NAMESPACE,
        add_namespace,
        "Admin: create a namespace (idempotent); with org, move it into that org",
        201,
        body="AdminNamespaceCreate",
        response="AdminNamespace",
        scopes=(ADMIN,),
    ),
    Api(
        routes.ORGS,
        list_orgs,
        "Admin: every org and its namespaces (a token authorises its namespace's org siblings)",
        response="AdminOrgs",
        scopes=(ADMIN,),
    ),
    Api(
        routes.TOKENS,
        list_tokens,
        "Admin: every token (digest prefix, namespace, label, scopes, expiry; no secrets)",
        response="AdminTokens",
        scopes=(ADMIN,),
    ),
    Api(
        routes.CREATE_TOKEN,
        create_token,
        "Admin: mint a token for a namespace (created if missing); the secret is answered once",
        201,
        body="AdminTokenCreate",
        response="AdminTokenCreated",
        scopes=(ADMIN,),
    ),
    Api(
        routes.REVOKE_TOKEN,
        revoke_token,
        "Admin: revoke the token whose digest starts with {digest} (8+ hex digits, tokens ls)",
        response="AdminTokenRevoked",
        scopes=(ADMIN,),
    ),
]
