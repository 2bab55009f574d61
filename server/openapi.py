"""The OpenAPI document, built from the same `Api` table the router serves.

Paths, methods, status codes and query parameters come from the route records, so they cannot
drift from what is served; the bodies' schemas are written by hand, in openapi_schemas.py. What
a parameter may hold (a name's pattern, a limit's range, a state's values) is read from the
constants the server checks it with, so a client generated from the document knows the rules.
"""

from __future__ import annotations

import copy
from typing import Any

from dreamlake.lakeshore import __version__
from dreamlake.lakeshore.plane import routes
from dreamlake.lakeshore.types import (
    MAX_LIST_LIMIT,
    MAX_NODES,
    QUEUE_STATES,
    STATES,
)

from .endpoint import Api
from .openapi_parts import ALNUM_ID, BOOL, INT, NAME, SECONDS, STR, _full, _ref
from .openapi_schemas import SCHEMAS
from .routes_dashboard import STEP_RANGE_S, WINDOW_RANGE_S
from .routes_objects import OBJECT_ID
from .routes_queues import ELASTICITY_MODES

#: The seconds a long-poll may ask for: any, held at most `max_wait_s` (GET /v1/hello).
WAIT = SECONDS
#: An id the list routes page by (`before`, `map`): what the store accepts.
LIST_ID = ALNUM_ID

QUERY_TYPES: dict[str, dict[str, Any]] = {
    "state": {"enum": list(STATES)},
    "elasticity": {"enum": list(ELASTICITY_MODES)},
    "force": BOOL,
    "verbose": BOOL,
    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIST_LIMIT},
    "wait": WAIT,
    "result_wait": WAIT,
    "since": INT,
    "rank": {"type": "integer", "minimum": 0, "maximum": MAX_NODES - 1},
    "queue": NAME,
    "before": LIST_ID,
    "map": LIST_ID,
    "window": {"type": "number", "minimum": WINDOW_RANGE_S[0], "maximum": WINDOW_RANGE_S[1]},
    "step": {"type": "number", "minimum": STEP_RANGE_S[0], "maximum": STEP_RANGE_S[1]},
}
#: Where a query parameter of one name means another thing on one route.
QUERY_ON_ROUTE: dict[tuple[str, str], dict[str, Any]] = {
    (routes.QUEUES.full_path, "state"): {"enum": list(QUEUE_STATES)},
}
#: Path parameters, by name (`name` and `id` name other things on other routes).
PATH_TYPES: dict[str, dict[str, Any]] = {
    "ns": NAME,
    "queue": NAME,
    "topic": NAME,
    "digest": {
        "type": "string",
        "pattern": "^[0-9a-fA-F]{8,}$",
        "description": "at least 8 hex digits of the token's digest (tokens ls)",
    },
}
OBJECT_ID_SCHEMA = {
    "type": "string",
    "pattern": _full(OBJECT_ID.pattern),
    "description": "a Ref's id: 26 lowercase letters and digits",
}


def _path_schema(api: Api, name: str) -> dict[str, Any]:
    path = api.full_path
    if name == "name" and ("/queues/{name}" in path or "/schedules/{name}" in path):
        return NAME
    if name == "id" and "/objects/{id}" in path:
        return OBJECT_ID_SCHEMA
    return PATH_TYPES.get(name, STR)


def _query_schema(api: Api, name: str) -> dict[str, Any]:
    return QUERY_ON_ROUTE.get((api.full_path, name)) or QUERY_TYPES[name]


ERRORS = {
    "400": "bad input (malformed body, wrong type, missing field)",
    "401": "missing or unknown token",
    "403": "token scoped to a namespace outside this org, or without a scope this route (or "
    "this payload: a thunk, udf call or exec needs submit-code) needs; see x-lakeshore-scopes",
    "404": "unknown namespace, queue, invocation, worker or object",
    "409": "conflict (exists, has members, default queue, lost lease)",
    "408": "request headers or body stalled (the connection is closed)",
    "413": "body above the per-request size limit (refused before it is read)",
    "415": "Content-Type neither msgpack nor JSON",
    "429": "admission refused (queue_full), or the server's request-body budget is in use "
    "(server_busy: nothing was changed, send it again after Retry-After)",
}

MEDIA = ("application/msgpack", "application/json")


def _content(schema: dict[str, Any]) -> dict[str, Any]:
    return {media: {"schema": schema} for media in MEDIA}


def _operation(api: Api) -> dict[str, Any]:
    params: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": _path_schema(api, name)}
        for name in (n.split(":")[0] for n in _path_params(api.full_path))
    ]
    params += [
        {"name": q, "in": "query", "required": False, "schema": _query_schema(api, q)}
        for q in api.query
    ]
    ok: dict[str, Any] = {"description": "OK"}
    if api.response:
        ok["content"] = _content(_ref(api.response))
    responses: dict[str, Any] = {str(api.status): ok}
    for code, text in ERRORS.items():
        if api.auth or code not in ("401", "403"):
            responses[code] = {"description": text, "content": _content(_ref("Error"))}
    op: dict[str, Any] = {
        "summary": api.summary,
        "operationId": api.handler.__name__ + "_" + api.method.lower(),
        "parameters": params,
        "responses": responses,
    }
    if api.body:
        # A body with a field it cannot go without cannot be left out either.
        needed = bool(SCHEMAS[api.body].get("required") or SCHEMAS[api.body].get("oneOf"))
        op["requestBody"] = {"required": needed, "content": _content(_ref(api.body))}
    if api.raw:
        _raw_bytes(api, op)
    if not api.auth:
        op["security"] = []
    elif api.scopes:
        # Any one of these token scopes opens the route (docs/security.md).
        op["x-lakeshore-scopes"] = list(api.scopes)
    return op


#: The bytes of a raw route (an object's, as the SDK lays them out), and the headers a PUT of
#: them declares (routes_objects.py).
OCTETS = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
RAW_HEADERS = {
    "x-lakeshore-size": ("the body's size in bytes (after the object's header)", INT),
    "x-lakeshore-digest": ("xxh3-128 of the body, 32 lowercase hex digits", STR),
}


def _raw_bytes(api: Api, op: dict[str, Any]) -> None:
    """A raw route carries bytes, not msgpack: an upload in, or a download out."""
    if api.method == "GET":
        op["responses"][str(api.status)]["content"] = OCTETS
        return
    op["requestBody"] = {"required": True, "content": OCTETS}
    op["responses"]["422"] = {
        "description": "the bytes are not the object the headers declare (object_corrupt): "
        "wrong magic, header length or digest; nothing was stored",
        "content": _content(_ref("Error")),
    }
    op["parameters"] += [
        {"name": name, "in": "header", "required": True, "description": text, "schema": schema}
        for name, (text, schema) in RAW_HEADERS.items()
    ]


def _path_params(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{")]


def _closed(schemas: dict[str, Any], schema: dict[str, Any]) -> None:
    """Mark a request body, and the items and branches it is made of, closed to unknown
    fields: every handler refuses them (`Fields.only`), so a client should know it. A field
    that holds a map of its own (resources, free, admission) keeps that map's own schema."""
    if "$ref" in schema:
        schema = schemas[schema["$ref"].rsplit("/", 1)[-1]]
    for branch in schema.get("oneOf", []):
        _closed(schemas, branch)
    if "properties" in schema:
        schema["additionalProperties"] = False
        for prop in schema["properties"].values():
            if prop.get("type") == "array" and isinstance(prop.get("items"), dict):
                _closed(schemas, prop["items"])


def document(apis: list[Api]) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for api in apis:
        paths.setdefault(api.full_path, {})[api.method.lower()] = _operation(api)
    schemas = copy.deepcopy(SCHEMAS)  # closed here, not in the table the responses share
    for api in apis:
        if api.body:
            _closed(schemas, _ref(api.body))
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Lakeshore control plane",
            "version": __version__,
            "description": "Bodies are application/msgpack by default; application/json is "
            "accepted and returned when asked (Content-Type / Accept). Bytes fields (payload, "
            "result, value, checkpoint) are msgpack bin, or base64 strings in JSON. Errors are "
            "{error: {code, message}}.",
        },
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": paths,
    }
