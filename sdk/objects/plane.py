"""The plane tier: objects through the control plane, for hosts that share nothing else.

Why: producers and workers on different hosts may share only the control plane's URL and a
token: no bucket credentials, no common disk. Then an object's durable copy goes up to the
server (`PUT /v1/namespaces/{ns}/objects/{id}`), which streams it to its own storage, and a
reader elsewhere fetches it back (`GET`) into its host tier. Neither side holds the object in
memory twice: the upload is sent from the buffer being put (an array's own memory, in chunks),
and the download is read straight into the reader's arena.

A Ref in the plane tier names it as its storage URL, `lakeshore+http://HOST:PORT/v1/namespaces/NS`
(`lakeshore+https://` over TLS): a durable copy is a durable copy, so everything that asks
`ref.storage` (is it durable? where do retention and readers look?) keeps working, and the Ref's
wire format is unchanged. The scheme says it is a Lakeshore control plane, not a plain HTTP file
server, and an older SDK reading such a Ref fails naming the URL rather than misreading it.

Where a durable copy goes (`durable_target`), first that applies:
    1. the storage the call names (`storage=`; a `lakeshore+http(s)://` URL is the plane tier);
    2. `via=`, a control plane over HTTP (`HttpDispatch`): the plane tier;
    3. storage configured for the process: `LAKESHORE_STORAGE` (a daemon's `--storage` reaches
       its jobs this way); spill's own `configure(storage=)` and a job's storage come first in
       spill.py;
    4. the caller's plane, when it is over HTTP: the queue a verb runs on (`using`), else the
       plane the caller passes as `default` (objects/__init__.py passes the process default
       when it is `LAKESHORE_URL`'s: a daemon's children get their daemon's): the plane tier;
    5. `$LAKESHORE_HOME/storage`.
The rule in one line: with no storage configured, an HTTP deployment's durable copies go
through its control plane, the one thing all its hosts are known to reach; `$LAKESHORE_HOME`'s
storage is private to a box, so a Ref naming it would be unreadable anywhere else.

Who may read (`tier_for`): a token is sent only to a control plane this process already talks
to, never to a URL a Ref names (a Ref is data, and a crafted one must not collect tokens). The
plane at the Ref's exact URL, if this process holds one (`via=`, the queue's, any plane a queue
verb used, the caller's `default`: `LAKESHORE_URL`'s); else the caller's own plane, which may
know the same server under another address (a loopback URL on the server's box, a DNS name
elsewhere).
"""

from __future__ import annotations

import contextlib
import http.client
import io
import os
import weakref
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import IO, TYPE_CHECKING, Any, Final, cast
from urllib.parse import quote, unquote, urlsplit

from dreamlake.lakeshore.errors import DispatchError, InvalidArgument, NotFound, Unavailable
from dreamlake.lakeshore.plane.routes import GET_OBJECT, NS_PREFIX, PUT_OBJECT, Route
from dreamlake.lakeshore.plane.wire import decode_answer, error_of
from dreamlake.lakeshore.storage import Storage
from dreamlake.lakeshore.storage import storage as open_storage

from .layout import ObjectCorrupt

if TYPE_CHECKING:
    import httpx

__all__ = [
    "NoPlaneAccess",
    "PlaneTier",
    "child_environment",
    "durable_target",
    "forget_planes",
    "is_plane_url",
    "tier_for",
    "using",
]

SCHEME: Final = "lakeshore+"
#: Bytes sent per write, and asked for per read (the server stores in chunks of the same size).
CHUNK: Final = 1 << 20
#: A slow disk's write-out rate: the answer to an upload waits for the server's fsync.
FSYNC_BYTES_PER_S: Final = 50e6
DIGEST_HEADER: Final = "x-lakeshore-digest"
SIZE_HEADER: Final = "x-lakeshore-size"
_NAMESPACES: Final = NS_PREFIX.removesuffix("{ns}")


class NoPlaneAccess(DispatchError):
    """A plane-tier Ref this process cannot read: it talks to no control plane over HTTP."""

    code = "no_plane_access"


def is_plane_url(url: object) -> bool:
    return isinstance(url, str) and url.startswith(("lakeshore+http://", "lakeshore+https://"))


def plane_url(base: str, namespace: str) -> str:
    """The storage URL a plane-tier Ref carries: the plane's base URL and the namespace."""
    return f"{SCHEME}{base.rstrip('/')}{_NAMESPACES}{quote(namespace, safe='')}"


def split(url: str) -> tuple[str, str]:
    """(the control plane's base URL, the namespace) a plane-tier URL names."""
    base, sep, ns = url.removeprefix(SCHEME).rpartition(_NAMESPACES)
    if not (is_plane_url(url) and sep and base and ns and "/" not in ns):
        raise InvalidArgument(
            f"malformed plane-tier URL {url[:200]!r}: it is "
            "lakeshore+http(s)://HOST[:PORT]/v1/namespaces/NAMESPACE"
        )
    return base, unquote(ns)


# -- one plane's objects ------------------------------------------------------------------------


class PlaneTier:
    """The objects of one namespace on one control plane, with a client's credentials.

    Made by `HttpDispatch.object_tier()`, with the plane's headers (token). Plain http without
    a proxy goes over `http.client` (`client=None`: an upload is sent from the caller's buffer,
    a download read into the caller's); TLS, proxies and injected transports go through the
    plane's httpx client, which holds their settings, streamed.
    """

    def __init__(
        self,
        base: str,
        namespace: str,
        headers: dict[str, str],
        *,
        client: httpx.Client | None,
        timeout_s: float,
    ) -> None:
        self.base = base.rstrip("/")
        self.namespace = namespace
        self.url = plane_url(self.base, namespace)
        self._headers = headers
        self._client = client
        self._timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"PlaneTier({self.url!r})"

    def for_namespace(self, namespace: str) -> PlaneTier:
        """The same plane and credentials, another namespace (a Ref's, an org sibling's)."""
        if namespace == self.namespace:
            return self
        return PlaneTier(
            self.base, namespace, self._headers, client=self._client, timeout_s=self._timeout_s
        )

    def environment(self) -> dict[str, str]:
        """The environment that makes a child process's default plane this one (a daemon's
        job processes). Never this client's token: each job reads and writes plane-tier
        objects with a token of its own (daemon/credentials.py), not its daemon's."""
        return {"LAKESHORE_URL": self.base, "LAKESHORE_NAMESPACE": self.namespace}

    def _path(self, route: Route, ref_id: str) -> str:
        return route.at(id=ref_id).url_path(self.namespace)

    # -- upload -----------------------------------------------------------------------------

    def upload(self, ref_id: str, prefix: bytes, body: memoryview, digest: str) -> None:
        """Store the object (its header `prefix`, then `body`) on the plane; returns once the
        server has it whole, checked against `digest` and fsynced (or raises)."""
        headers = {
            **self._headers,
            "content-type": "application/octet-stream",
            "content-length": str(len(prefix) + body.nbytes),
            DIGEST_HEADER: digest,
            SIZE_HEADER: str(body.nbytes),
        }
        what = f"upload object {ref_id} to"
        if self._client is None:
            status, content_type, answer = self._put_direct(ref_id, headers, prefix, body, what)
        else:
            status, content_type, answer = self._put_httpx(ref_id, headers, prefix, body, what)
        if status not in (200, 201):
            raise _refusal(status, content_type, answer)

    def _put_direct(
        self, ref_id: str, headers: dict[str, str], prefix: bytes, body: memoryview, what: str
    ) -> tuple[int, str, bytes]:
        conn = self._connection()
        try:
            with self._reaching(what):
                conn.putrequest(
                    PUT_OBJECT.method, self._target(PUT_OBJECT, ref_id), skip_accept_encoding=True
                )
                for name, value in headers.items():
                    conn.putheader(name, value)
                conn.endheaders()
                # A server that refuses early (a 409, a 413) stops reading: its answer says why.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    for part in _parts(prefix, body):
                        conn.send(part)
                if conn.sock is not None:  # the server writes out and fsyncs before it answers
                    conn.sock.settimeout(self._answer_timeout_s(body.nbytes))
                response = conn.getresponse()
                return response.status, response.getheader("content-type", ""), response.read()
        finally:
            conn.close()

    def _put_httpx(
        self, ref_id: str, headers: dict[str, str], prefix: bytes, body: memoryview, what: str
    ) -> tuple[int, str, bytes]:
        import httpx

        assert self._client is not None
        parts = cast("Iterator[bytes]", _parts(prefix, body))  # views: httpx sends them as is
        wait = httpx.Timeout(self._timeout_s, read=self._answer_timeout_s(body.nbytes))
        request = self._client.build_request(
            PUT_OBJECT.method,
            self._path(PUT_OBJECT, ref_id),
            content=parts,
            headers=headers,
            timeout=wait,
        )
        request.headers.pop("transfer-encoding", None)  # the length is known: sent as declared
        request.headers["content-length"] = headers["content-length"]
        with self._reaching(what):
            response = self._client.send(request)
        return response.status_code, response.headers.get("content-type", ""), response.content

    # -- download ---------------------------------------------------------------------------

    def open(self, ref_id: str) -> IO[bytes]:
        """A stream of the object's bytes as stored (`NotFound` when the plane has none)."""
        what = f"read object {ref_id} from"
        if self._client is None:
            conn = self._connection()
            try:
                with self._reaching(what):
                    conn.request(
                        GET_OBJECT.method, self._target(GET_OBJECT, ref_id), headers=self._headers
                    )
                    response = conn.getresponse()
                    if response.status != 200:
                        kind = response.getheader("content-type", "")
                        raise _refusal(response.status, kind, response.read())
            except BaseException:
                conn.close()
                raise
            return io.BufferedReader(_Download(response, conn.close), CHUNK)
        with self._reaching(what):
            request = self._client.build_request(
                GET_OBJECT.method, self._path(GET_OBJECT, ref_id), headers=self._headers
            )
            streamed = self._client.send(request, stream=True)
        if streamed.status_code != 200:
            streamed.read()
            streamed.close()
            raise _refusal(
                streamed.status_code, streamed.headers.get("content-type", ""), streamed.content
            )
        return io.BufferedReader(_Chunks(streamed.iter_raw(CHUNK), streamed.close), CHUNK)

    # -- plumbing ---------------------------------------------------------------------------

    def _connection(self) -> http.client.HTTPConnection:
        parts = urlsplit(self.base)
        return http.client.HTTPConnection(
            parts.hostname or "", parts.port or 80, timeout=self._timeout_s
        )

    def _answer_timeout_s(self, size: int) -> float:
        """How long an upload's answer may take: the request timeout, plus the server's
        flush and fsync of `size` bytes at a slow disk's pace."""
        return self._timeout_s + size / FSYNC_BYTES_PER_S

    def _target(self, route: Route, ref_id: str) -> str:
        return urlsplit(self.base).path.rstrip("/") + self._path(route, ref_id)

    @contextlib.contextmanager
    def _reaching(self, what: str) -> Iterator[None]:
        """Transport failures as the outage they are, naming the object and the plane."""
        import httpx

        try:
            yield
        except (OSError, http.client.HTTPException, httpx.HTTPError) as exc:
            raise Unavailable(f"cannot {what} the control plane at {self.base}: {exc!r}") from exc


def _parts(prefix: bytes, body: memoryview) -> Iterator[bytes | memoryview]:
    """The object's bytes in chunks, views of the caller's buffer (no copy)."""
    yield prefix
    flat = body.cast("B") if body.format != "B" or body.ndim != 1 else body
    for start in range(0, flat.nbytes, CHUNK):
        yield flat[start : start + CHUNK]


def _refusal(status: int, content_type: str, answer: bytes) -> DispatchError:
    """The server's error, as the class the SDK raises for it (`ObjectCorrupt` included)."""
    data = decode_answer(status, content_type, answer)
    error = error_of(status, data)
    if isinstance(data, dict) and data.get("error", {}).get("code") == ObjectCorrupt.code:
        return ObjectCorrupt(str(error))
    return error


class _Download(io.RawIOBase):
    """An HTTP answer's body as a raw stream (`readinto` lands in the caller's buffer)."""

    def __init__(self, response: http.client.HTTPResponse, close: Any) -> None:
        super().__init__()
        self._response = response
        self._close = close

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._response.readinto(buffer)

    def close(self) -> None:
        if not self.closed:
            self._response.close()
            self._close()
        super().close()


class _Chunks(io.RawIOBase):
    """An iterator of byte chunks (httpx's streamed body) as a raw stream."""

    def __init__(self, chunks: Iterator[bytes], close: Any) -> None:
        super().__init__()
        self._chunks = chunks
        self._pending = memoryview(b"")
        self._close = close

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            block = next(self._chunks, None)
            if block is None:
                return 0
            self._pending = memoryview(block)
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def close(self) -> None:
        if not self.closed:
            self._close()
        super().close()


# -- whose plane ----------------------------------------------------------------------------------

_UNSET: Final = object()
#: The caller's plane in this context (set by queue verbs and worker loops: `using`).
_CURRENT: ContextVar[Any] = ContextVar("lakeshore_objects_plane", default=_UNSET)
#: Planes over HTTP that queue verbs used in this process, by base URL: whose tokens read
#: plane-tier Refs later (`dls.get` on a Ref a result handed back). Weak: closing and dropping
#: a plane forgets it.
_KNOWN: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()


def forget_planes() -> None:
    """Forget the planes used so far (a daemon's job process between jobs: each job's token is
    its own, and dies with the job)."""
    _KNOWN.clear()


def _tier_of(plane: Any) -> PlaneTier | None:
    """`plane`'s object tier when it is a control plane over HTTP (an `HttpDispatch`)."""
    make = getattr(plane, "object_tier", None)
    tier: PlaneTier | None = make() if callable(make) else None
    return tier


def _remember(plane: Any) -> None:
    url = getattr(plane, "url", None)
    if isinstance(url, str) and callable(getattr(plane, "object_tier", None)):
        _KNOWN[url] = plane


@contextlib.contextmanager
def using(plane: Any) -> Iterator[None]:
    """Run the block with `plane` as the caller's plane for objects: where durable copies go
    when no storage is configured (the plane tier, when it is over HTTP), and whose token reads
    plane-tier Refs. Queue verbs and worker loops wrap themselves in it (None: no change)."""
    if plane is None:
        yield
        return
    _remember(plane)
    token = _CURRENT.set(plane)
    try:
        yield
    finally:
        _CURRENT.reset(token)


#: The plane a caller falls back on when no `using` is in effect: none of its own. Objects never
#: open a plane themselves (the planes sit above them: `HttpPlane.object_tier` makes a
#: `PlaneTier`); the caller that knows the process's plane passes it in (objects/__init__.py).
DefaultPlane = Callable[[], Any]


def _no_plane() -> Any:
    return None


def _callers_plane(default: DefaultPlane) -> Any:
    """The plane in effect: `using`'s, else the caller's `default`."""
    plane = _CURRENT.get()
    return default() if plane is _UNSET else plane


def durable_target(
    storage: str | Storage | PlaneTier | None,
    via: Any = None,
    default: DefaultPlane = _no_plane,
) -> Storage | PlaneTier:
    """Where a durable copy goes: the storage or plane tier (see the module docstring);
    `default` gives the caller's plane when no `using` is in effect."""
    if isinstance(storage, (Storage, PlaneTier)):
        return storage
    if storage is not None:
        return tier_for(storage, via) if is_plane_url(storage) else open_storage(storage)
    if via is not None:
        tier = _tier_of(via)
        if tier is None:
            raise InvalidArgument(
                f"via= takes a control plane over HTTP (an HttpDispatch), got {via!r}: an "
                "embedded plane has no plane tier (its box's storage is the durable tier)"
            )
        _remember(via)
        return tier
    if not os.environ.get("LAKESHORE_STORAGE"):
        tier = _tier_of(_callers_plane(default))
        if tier is not None:
            return tier
    return open_storage(None)


def tier_for(url: str, via: Any = None, default: DefaultPlane = _no_plane) -> PlaneTier:
    """The tier to read (or write) the plane-tier URL `url` through, with a token this process
    already sends to that plane; never a token sent to a URL only the Ref names. `default`
    gives the caller's plane when neither `via` nor `using` names one."""
    base, ns = split(url)
    caller = via if via is not None else _callers_plane(default)
    for plane in (caller, _KNOWN.get(base), default()):
        tier = _tier_of(plane)
        if tier is not None and tier.base == base:
            return tier.for_namespace(ns)
    tier = _tier_of(caller)
    if tier is not None:  # the same server under another address, presumably: ask it
        return _Elsewhere(tier.for_namespace(ns), url)
    raise NoPlaneAccess(
        f"the object lives in the plane tier of {base} (namespace '{ns}'), and this process "
        "talks to no control plane over HTTP to read it with: read it through the queue it "
        "came from, pass dls.get(ref, via=HttpDispatch(url, token=...)), or set LAKESHORE_URL "
        "and LAKESHORE_TOKEN"
    )


class _Elsewhere(PlaneTier):
    """The caller's plane, asked for an object whose Ref names another URL for it."""

    def __init__(self, tier: PlaneTier, named: str) -> None:
        super().__init__(
            tier.base, tier.namespace, tier._headers, client=tier._client, timeout_s=tier._timeout_s
        )
        self._named = named

    def open(self, ref_id: str) -> IO[bytes]:
        try:
            return super().open(ref_id)
        except NotFound as exc:
            raise NotFound(
                f"{exc} (its Ref names {self._named}; asked {self.base}, this process's plane)"
            ) from None


def child_environment(plane: Any) -> dict[str, str]:
    """What a daemon adds to its job processes' environment so that they read and write
    plane-tier objects through its plane ({} for an embedded plane); each job brings its own
    token (daemon/credentials.py)."""
    tier = _tier_of(plane)
    return {} if tier is None else tier.environment()
