"""Objects through the control plane (the plane tier): `PUT`/`GET .../objects/{id}`.

Why: producers and workers on different hosts may share nothing but the control plane: no
bucket credentials, no common disk. The plane tier keeps a `Ref`'s durable copy in the server's
own storage (`lakeshore server --storage`: its disk by default, or `s3://`), and these routes
move it up and down.

The server never holds a whole object and never decodes one. A PUT streams its body to storage
in chunks of `CHUNK` (a temp file, fsynced and renamed once complete; for S3 a spooled upload
on completion), checking the bytes as they pass: the object layout's magic, a header whose
length agrees with the declared body size, and the body's xxh3-128 hash against the
`x-lakeshore-digest` the client sent. Only an upload whose every byte arrived and matched
becomes visible, under `_objects/plane/{ns}/{id}`: a truncated, forged or oversized one leaves
nothing behind. A GET (and HEAD) streams the stored bytes back as they are.

Object PUTs are exempt from the per-request body limit and the in-memory body budget
(`body_budget.py`): those bound what the server holds in memory, and an upload here holds one
chunk. They have their own bound, `--max-object-mb`, checked against Content-Length before a
byte is read. Keys are namespaced, so an id from another namespace is a 404 like any unknown id
(a token for a namespace it may not reach is refused 403 before any lookup, whatever the id).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import IO, Any, Final

import xxhash
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Scope

from dreamlake.lakeshore.errors import Conflict, InvalidArgument, NotFound, PayloadTooLarge
from dreamlake.lakeshore.objects.layout import ALIGN, MAGIC, PREFIX, ObjectCorrupt
from dreamlake.lakeshore.objects.plane import is_plane_url, split
from dreamlake.lakeshore.plane import routes
from dreamlake.lakeshore.plane.auth import JOB, READ, SUBMIT_DATA, WORK
from dreamlake.lakeshore.storage import OBJECTS_PREFIX, Storage, StorageRef, sniff_ref

from .blocking import run_blocking
from .body_budget import ClientGone
from .endpoint import Api, Call
from .openapi_parts import INT, STR, _obj
from .openapi_schemas import SCHEMAS
from .wire import respond, wants_json

#: Bytes written to storage at a time, and read back at a time.
CHUNK: Final = 1 << 20
#: Default of `lakeshore server --max-object-mb`.
MAX_OBJECT_BYTES: Final = 4 << 30
#: The most an object's header and padding may take (a Ref's header is about a hundred bytes).
MAX_PREFIX: Final = 64 * 1024
DIGEST_HEADER: Final = "x-lakeshore-digest"
SIZE_HEADER: Final = "x-lakeshore-size"
LIMIT_OPTION: Final = "`lakeshore server --max-object-mb` (LAKESHORE_MAX_OBJECT_MB)"

log = logging.getLogger("lakeshore.server")

OBJECT_ID = re.compile(r"[0-9a-z]{26}")
_DIGEST = re.compile(r"[0-9a-f]{32}")
_COUNT = re.compile(r"[0-9]{1,19}")

SCHEMAS.setdefault(
    "ObjectStored",
    _obj({"id": STR, "size": INT, "digest": STR, "created": {"type": "boolean"}}),
)


class UploadCorrupt(ObjectCorrupt):
    """An upload whose bytes are not the object its headers declare (422): nothing was stored."""

    status = 422


@dataclass(frozen=True)
class ObjectTier:
    """Where this server keeps plane-tier objects, and the largest it accepts."""

    storage: Storage
    max_bytes: int = MAX_OBJECT_BYTES

    @staticmethod
    def key(ns: str, ref_id: str) -> str:
        """Namespaced, under the object store's reserved prefix (jobs cannot write there)."""
        return f"{OBJECTS_PREFIX}/plane/{ns}/{ref_id}"


def streams_to_storage(scope: Scope) -> bool:
    """A request whose body goes to storage in chunks, not into memory: exempt from the body
    budget (`BodyBudget(exempt=...)`), bounded by `--max-object-mb` in its route instead."""
    put = routes.PUT_OBJECT
    return scope.get("method") == put.method and put.matches(scope.get("path", ""))


def _tier(call: Call) -> ObjectTier:
    tier: ObjectTier = call.request.app.state.lakeshore_objects
    return tier


def _object_id(call: Call) -> str:
    ref_id = call.param("id")
    if not OBJECT_ID.fullmatch(ref_id):
        raise InvalidArgument(
            f"an object id is 26 lowercase letters and digits (a Ref's id), got {ref_id[:64]!r}"
        )
    return ref_id


# -- retention ----------------------------------------------------------------------------------


def delete_owned(
    tier: ObjectTier, ns: str, refs: list[StorageRef]
) -> tuple[list[StorageRef], int, list[str]]:
    """Delete the plane-tier copies among `refs`, the spilled objects of rows that retention
    removed from namespace `ns`; returns the refs left for the caller (other tiers), how many
    copies went, and a line per copy that could not be deleted.

    Only copies under `ns` itself are touched, whatever namespace a Ref's URL names: a row of
    one namespace can carry a Ref naming another's object (copied, or forged), and retention
    of the one must never delete the other's. Such a Ref is dropped without deleting anything.
    """
    left: list[StorageRef] = []
    deleted = 0
    problems: list[str] = []
    for ref in refs:
        if not is_plane_url(ref.url):
            left.append(ref)
            continue
        ref_id = ref.key.rpartition("/")[2]
        try:
            named = split(ref.url)[1]
        except InvalidArgument:
            named = None
        if named != ns or not OBJECT_ID.fullmatch(ref_id):
            problems.append(f"{ref.url}/{ref.key}: kept (not an object of namespace {ns})")
            continue
        try:
            tier.storage.delete(tier.key(ns, ref_id))  # idempotent: a second trim finds none
            deleted += 1
        except Exception as exc:
            problems.append(f"{ref.url}/{ref.key}: {exc}")
    return left, deleted, problems


def drop_superseded(tier: ObjectTier, ns: str, previous: bytes) -> None:
    """Delete the plane-tier copy of a checkpoint a newer one of the same invocation replaced
    (issue 35), once the new one is on the row. Here, not by the worker: a worker holds no
    power to delete plane-tier objects, and gains none. The rules are retention's
    (`delete_owned`): a spilled object of this namespace only; a checkpoint in another tier is
    the worker's to delete (sdk/work/checkpoints.py), and any trouble is logged, never the
    checkpoint's refusal (it is stored already)."""
    from dreamlake.lakeshore.spill import (
        is_spilled,  # the object store's names: imported at the first one
    )

    ref = sniff_ref(previous)
    if ref is None or not is_plane_url(ref.url) or not is_spilled(ref):
        return
    _, _, problems = delete_owned(tier, ns, [ref])
    for line in problems:
        log.warning("a superseded checkpoint was not deleted: %s", line)


# -- PUT ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Declared:
    """What an upload's headers promise: total bytes, body bytes and the body's hash."""

    total: int
    size: int
    digest: str

    @property
    def prefix(self) -> int:
        return self.total - self.size


def _declared(request: Request, tier: ObjectTier, ref_id: str) -> _Declared:
    """The upload's headers, checked before a byte of its body is read."""
    length = request.headers.get("content-length", "")
    if "transfer-encoding" in request.headers or not _COUNT.fullmatch(length):
        raise InvalidArgument(
            "an object upload declares its length: send Content-Length (not a chunked body)"
        )
    total = int(length)
    if total > tier.max_bytes:
        raise PayloadTooLarge(
            f"object {ref_id} is {total} bytes, over this server's limit of {tier.max_bytes} "
            f"bytes ({tier.max_bytes / 2**20:g} MiB) per object; its operator can raise it "
            f"with {LIMIT_OPTION}"
        )
    digest = request.headers.get(DIGEST_HEADER, "")
    if not _DIGEST.fullmatch(digest):
        raise InvalidArgument(
            f"header {DIGEST_HEADER} is the body's xxh3-128 hash as 32 lowercase hex digits "
            f"(a Ref's digest), got {digest[:64]!r}"
        )
    size_text = request.headers.get(SIZE_HEADER, "")
    if not _COUNT.fullmatch(size_text):
        raise InvalidArgument(
            f"header {SIZE_HEADER} is the body's size in bytes (a Ref's size), "
            f"got {size_text[:64]!r}"
        )
    declared = _Declared(total, int(size_text), digest)
    prefix = declared.prefix
    if not (ALIGN <= prefix <= MAX_PREFIX and prefix % ALIGN == 0):
        raise InvalidArgument(
            f"Content-Length {total} minus {SIZE_HEADER} {declared.size} leaves {prefix} bytes "
            f"for the object's header, which takes a multiple of {ALIGN} from {ALIGN} to "
            f"{MAX_PREFIX} bytes: the two headers disagree"
        )
    return declared


class _Check:
    """Checks an upload's bytes as they pass: the layout's magic and header length in the
    first bytes, then the body's hash (xxh3-128, incremental: no chunk is kept)."""

    def __init__(self, ref_id: str, declared: _Declared) -> None:
        self.ref_id = ref_id
        self.declared = declared
        self.seen = 0
        self._head = bytearray()
        self._hash = xxhash.xxh3_128()

    def feed(self, chunk: bytes) -> None:
        start, prefix = self.seen, self.declared.prefix
        self.seen += len(chunk)
        view = memoryview(chunk)
        if start < prefix:
            if len(self._head) < PREFIX.size:
                self._head += view[: PREFIX.size - len(self._head)]
                if len(self._head) == PREFIX.size:
                    self._check_head()
            view = view[prefix - start :]
        if view:
            self._hash.update(view)

    def _check_head(self) -> None:
        magic, head_len = PREFIX.unpack(bytes(self._head))
        if magic != MAGIC:
            raise UploadCorrupt(
                f"object {self.ref_id} does not start with {MAGIC!r}: the body of an object "
                "upload is the object's bytes as the SDK lays them out; nothing was stored"
            )
        start = PREFIX.size + head_len
        start += -start % ALIGN
        if start != self.declared.prefix:
            raise UploadCorrupt(
                f"object {self.ref_id}'s header puts its body at byte {start}, but "
                f"Content-Length minus {SIZE_HEADER} puts it at {self.declared.prefix}; "
                "nothing was stored"
            )

    def finish(self) -> None:
        """Refuse an upload whose body does not hash to the declared digest."""
        got = self._hash.hexdigest()
        if got != self.declared.digest:
            raise UploadCorrupt(
                f"the body of object {self.ref_id} hashes to {got}, not the {DIGEST_HEADER} "
                f"{self.declared.digest}: altered or mislabelled in transit; nothing was stored"
            )


async def put_object(call: Call) -> Response:
    """Store an object's bytes, streamed: visible only once complete and proven."""
    tier = _tier(call)
    ref_id = _object_id(call)
    declared = _declared(call.request, tier, ref_id)
    key = tier.key(call.ns, ref_id)
    stored = await run_blocking(_stored, tier.storage, key)
    if stored is not None:
        if stored == (declared.size, declared.digest):  # the same content: a repeated upload
            return _answer(call, ref_id, declared, created=False)
        raise Conflict(
            f"object {ref_id} already exists in namespace '{call.ns}' with other content "
            f"({stored[0]} bytes, digest {stored[1]}): an id names one content for good"
        )
    out = await run_blocking(tier.storage.open, key, "wb")
    try:
        await _receive(call.request, out, _Check(ref_id, declared))
    except BaseException:
        await run_blocking(_abort, out)
        raise
    await run_blocking(out.close)  # fsync and rename (or upload): the object appears whole
    return _answer(call, ref_id, declared, created=True)


async def _receive(request: Request, out: IO[Any], check: _Check) -> None:
    """Copy the body to `out` in chunks of about `CHUNK`, checking it on the way."""
    pending = bytearray()
    try:
        async for chunk in request.stream():
            if not chunk:
                continue
            check.feed(chunk)
            pending += chunk
            if len(pending) >= CHUNK:
                full, pending = pending, bytearray()
                await run_blocking(out.write, full)
    except ClientDisconnect:
        raise ClientGone(
            f"the client went away after {check.seen} of {check.declared.total} bytes of "
            f"object {check.ref_id}: nothing was stored"
        ) from None
    if pending:
        await run_blocking(out.write, pending)
    check.finish()


def _abort(out: IO[Any]) -> None:
    """Drop what an unfinished upload wrote (storage writers keep nothing unless committed)."""
    abort = getattr(out, "abort", None)
    if abort is not None:
        abort()
    else:  # pragma: no cover - every storage's binary writer has abort()
        out.close()


def _stored(storage: Storage, key: str) -> tuple[int, str] | None:
    """(body size, digest) of the object stored at `key`, or None when there is none.

    Read back and hashed rather than kept beside it: a second copy of the metadata could
    disagree with the bytes, and only a repeated upload of an existing id pays for this.
    """
    try:
        src = storage.open(key, "rb")
    except NotFound:
        return None
    with src:
        head = src.read(PREFIX.size)
        if len(head) < PREFIX.size:
            return (-1, "")
        _, head_len = PREFIX.unpack(head)
        start = PREFIX.size + head_len
        src.read(start + (-start % ALIGN) - PREFIX.size)
        digest, size = xxhash.xxh3_128(), 0
        while block := src.read(CHUNK):
            digest.update(block)
            size += len(block)
    return size, digest.hexdigest()


def _answer(call: Call, ref_id: str, declared: _Declared, *, created: bool) -> Response:
    data = {"id": ref_id, "size": declared.size, "digest": declared.digest, "created": created}
    return respond(data, status=201 if created else 200, as_json=wants_json(call.request))


# -- GET / HEAD -----------------------------------------------------------------------------------


async def get_object(call: Call) -> Response:
    """The object's bytes as stored, streamed; HEAD answers its length only."""
    tier = _tier(call)
    ref_id = _object_id(call)
    try:
        src: IO[bytes] = await run_blocking(tier.storage.open, tier.key(call.ns, ref_id), "rb")
    except NotFound:
        raise NotFound(
            f"no object {ref_id} in namespace '{call.ns}' of this control plane: it was never "
            "uploaded here, or belongs to another namespace"
        ) from None
    headers = {"content-type": "application/octet-stream"}
    length = _length(src)
    if length is not None:
        headers["content-length"] = str(length)
    if call.request.method == "HEAD":
        src.close()
        return Response(status_code=200, headers=headers)
    return StreamingResponse(_chunks(src), headers=headers)


def _length(src: IO[bytes]) -> int | None:
    """The stored size when the stream is a file (else the answer is chunked)."""
    try:
        return os.fstat(src.fileno()).st_size
    except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation: not a file
        return None


async def _chunks(src: IO[bytes]) -> AsyncIterator[bytes]:
    try:
        while block := await run_blocking(src.read, CHUNK):
            yield block
    finally:
        with contextlib.suppress(Exception):
            src.close()  # instant for a file; an S3 body drops its connection


ROUTES = [
    Api(
        routes.PUT_OBJECT,
        put_object,
        "Upload an object's bytes (the plane tier), streamed to the server's storage: "
        "Content-Length, x-lakeshore-size (body bytes) and x-lakeshore-digest (xxh3-128 of "
        "the body) are checked before it becomes visible; 201 stored, 200 already there",
        status=201,
        response="ObjectStored",
        scopes=(SUBMIT_DATA, WORK, JOB),
        raw=True,
    ),
    Api(
        routes.GET_OBJECT,
        get_object,
        "An object's bytes (the plane tier), streamed as stored (application/octet-stream); "
        "HEAD for its length",
        scopes=(READ, WORK, JOB),
        raw=True,
    ),
]
