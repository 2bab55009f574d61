"""Job runtimes over HTTP (issue 46): a bundle's blobs and manifest, content-addressed.

A producer asks which of its blobs the namespace lacks (`POST .../runtime/missing`), sends only
those (`POST .../runtime/blobs`, a batch that commits as one), then the manifest that names them
(`POST .../runtime/manifests`); a submit item's `runtime.bundle` names the manifest's digest. A
daemon reads them back by name. The server checks names against content and paths against the
tree, and never unpacks a bundle: what it stores is bytes and a list of entries
(sdk/plane/store/runtimes.py, which every plane shares).

Shipping a bundle sends code to the workers, so putting one needs the `submit-code` scope, as a
payload with code does; reading one back is for the namespace's workers and readers. A batch of
blobs is one request body, bounded by `--max-body-mb` like any other: the SDK sends batches well
under it, and a single file larger than it cannot ship through this server.
"""

from __future__ import annotations

from typing import Any

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.plane import routes
from dreamlake.lakeshore.plane.auth import READ, SUBMIT_CODE, WORK

from .endpoint import Api, Call
from .openapi_parts import BYTES, INT, STR, STRS, _obj, _ref
from .openapi_schemas import SCHEMAS

_ENTRY = _obj(
    {
        "path": STR,
        "mode": INT,
        "size": INT,
        "sha256": {**STR, "description": "a file: the sha256 of its bytes"},
        "link": {**STR, "description": "a symlink: its relative target, inside the tree"},
    },
    ("path", "mode", "size"),
)
SCHEMAS.setdefault(
    "Runtime",
    _obj(
        {
            "bundle": {**STR, "description": "a manifest's digest, sha256:<hex>; null: none"},
            "requirements": {**STRS, "description": "requirement strings, built with uv"},
            "env": {"type": "object", "additionalProperties": STR},
            "workdir": {"type": "boolean", "description": "the bundle holds a workdir/"},
            "sources": {**STRS, "description": "the producer's own modules it ships"},
            "files": INT,
            "bytes": INT,
        }
    ),
)
SCHEMAS.setdefault("RuntimeAsk", _obj({"blobs": STRS}, ("blobs",)))
SCHEMAS.setdefault("RuntimeMissing", _obj({"missing": STRS}))
_BLOB = _obj({"sha256": STR, "data": BYTES}, ("sha256", "data"))
SCHEMAS.setdefault("RuntimeBlobs", _obj({"blobs": {"type": "array", "items": _BLOB}}, ("blobs",)))
SCHEMAS.setdefault("RuntimeBlobsStored", _obj({"stored": INT}))
SCHEMAS.setdefault("RuntimeBlob", _BLOB)
SCHEMAS.setdefault(
    "RuntimeManifest",
    _obj({"digest": STR, "entries": {"type": "array", "items": _ENTRY}}, ("entries",)),
)
SCHEMAS.setdefault("RuntimeManifestPut", _obj({"manifest": _ref("RuntimeManifest")}, ("manifest",)))
SCHEMAS.setdefault("RuntimeManifestStored", _obj({"digest": STR}))
SCHEMAS.setdefault("RuntimeManifestRead", _obj({"manifest": _ref("RuntimeManifest")}))


async def runtime_missing(call: Call) -> dict[str, list[str]]:
    b = call.body
    b.only("blobs")
    shas = b.str_list("blobs")
    missing = await call.run(call.store.runtime_missing, call.ns, shas)
    return {"missing": missing}


async def put_runtime_blobs(call: Call) -> dict[str, int]:
    b = call.body
    b.only("blobs")
    blobs: list[tuple[str, bytes]] = []
    for item in b.items("blobs"):
        item.only("sha256", "data")
        blobs.append((item.req_text("sha256"), item.req_blob("data")))
    stored = await call.run(call.store.put_runtime_blobs, call.ns, blobs)
    return {"stored": stored}


async def put_runtime_manifest(call: Call) -> dict[str, str]:
    b = call.body
    b.only("manifest")
    manifest: Any = b.data.get("manifest")
    if not isinstance(manifest, dict):
        raise InvalidArgument("field 'manifest' must be a map of 'entries' (and 'digest')")
    digest = await call.run(call.store.put_runtime_manifest, call.ns, manifest)
    return {"digest": digest}


async def runtime_manifest(call: Call) -> dict[str, Any]:
    manifest = await call.run(call.store.runtime_manifest, call.ns, call.param("digest"))
    return {"manifest": manifest}


async def runtime_blob(call: Call) -> dict[str, Any]:
    sha = call.param("sha")
    data = await call.run(call.store.runtime_blob, call.ns, sha)
    return {"sha256": sha, "data": data}


ROUTES = [
    Api(
        routes.RUNTIME_MISSING,
        runtime_missing,
        "Which of these blobs (sha256 hex) the namespace does not hold: send only those",
        body="RuntimeAsk",
        response="RuntimeMissing",
        scopes=(SUBMIT_CODE,),
    ),
    Api(
        routes.PUT_RUNTIME_BLOBS,
        put_runtime_blobs,
        "Store blobs named by the sha256 of their bytes, in one commit; how many were new",
        body="RuntimeBlobs",
        response="RuntimeBlobsStored",
        scopes=(SUBMIT_CODE,),
    ),
    Api(
        routes.PUT_RUNTIME_MANIFEST,
        put_runtime_manifest,
        "Store a bundle's manifest, whose blobs are stored already; answers its digest",
        body="RuntimeManifestPut",
        response="RuntimeManifestStored",
        scopes=(SUBMIT_CODE,),
    ),
    Api(
        routes.RUNTIME_MANIFEST,
        runtime_manifest,
        "A bundle's manifest, by digest",
        response="RuntimeManifestRead",
        scopes=(WORK, READ),
    ),
    Api(
        routes.RUNTIME_BLOB,
        runtime_blob,
        "One blob's bytes, by its sha256",
        response="RuntimeBlob",
        scopes=(WORK, READ),
    ),
]
