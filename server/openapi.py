"""The OpenAPI document, built from the same `Api` table the router serves.

Paths, methods, status codes and query parameters come from the route records, so they cannot
drift from what is served; the bodies' schemas are written by hand, in openapi_schemas.py.
"""

from __future__ import annotations

from typing import Any

from dreamlake.lakeshore import __version__

from .endpoint import Api
from .openapi_schemas import BOOL, INT, NUM, SCHEMAS, STR, _ref
from .routes_queues import ELASTICITY_MODES

QUERY_TYPES = {
    "state": STR,
    "elasticity": {"enum": list(ELASTICITY_MODES)},
    "force": BOOL,
    "verbose": BOOL,
    "limit": INT,
    "wait": NUM,
    "result_wait": NUM,
    "since": INT,
    "queue": STR,
    "before": STR,
    "map": STR,
    "window": NUM,
    "step": NUM,
}

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
        {"name": name.split(":")[0], "in": "path", "required": True, "schema": STR}
        for name in _path_params(api.full_path)
    ]
    params += [
        {"name": q, "in": "query", "required": False, "schema": QUERY_TYPES[q]} for q in api.query
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
        op["requestBody"] = {"required": False, "content": _content(_ref(api.body))}
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


def document(apis: list[Api]) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for api in apis:
        paths.setdefault(api.full_path, {})[api.method.lower()] = _operation(api)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Lakeshore control plane",
            "version": __version__,
            "description": "Bodies are application/msgpack by default; application/json is "
            "accepted and returned when asked (Content-Type / Accept). Bytes fields (payload, "
            "result, value) are msgpack bin, or base64 strings in JSON. Errors are "
            "{error: {code, message}}.",
        },
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": paths,
    }
