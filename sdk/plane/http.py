"""`HttpPlane` (also named `HttpDispatch`): the plane as seen through a `lakeshore server`.

Every `Plane` method is one request over one keep-alive connection (so a submit is one round
trip): the lean HTTP/1.1 path (http11.py) where it can carry it, else an `httpx.Client`, made
and imported only then (httpx loads its command line, click and rich, when they are installed:
more than the rest of the SDK). Bodies are msgpack, and the records and error classes are the
ones the embedded plane returns and raises: callers never ask which plane they hold. Waits are
long-polls: the server holds the request on its wake-up for up to its cap, and a longer wait
simply asks again. This module imports only msgpack (and httpx when it needs it), so a producer
never pulls in the server stack.
"""

from __future__ import annotations

import http.client
import json
import random
import re
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Self, TypeVar
from urllib.parse import quote, urlsplit

import msgpack

from ..errors import (
    ERRORS_BY_CODE,
    DispatchError,
    InvalidArgument,
    QueueFullError,
    ServerBusy,
    Unavailable,
)
from ..types import (
    Ack,
    Claim,
    Frame,
    Invocation,
    QueueInfo,
    SubmitRequest,
    WorkerInfo,
    storable_text,
    unsendable,
)
from . import http11
from .default import env_namespace, env_token, env_url
from .providers import ProviderInfo
from .retention import Trimmed
from .tls import Verify, tls_context, untrusted_message
from .waiting import Deadline, RetryReport, room_wait, through_outages

if TYPE_CHECKING:
    import httpx

    from ..objects.plane import PlaneTier

MSGPACK = "application/msgpack"
#: The server holds a long-poll at most this long; a longer wait is split into several.
SERVER_WAIT_CAP_S = 60.0
#: Extra client time on top of a long-poll's wait, for the round trip and a busy server.
WAIT_MARGIN_S = 10.0
#: Timeout of a request that does not wait.
REQUEST_TIMEOUT_S = 30.0
#: How long to wait before sending again a request a busy server refused without a hint.
BUSY_RETRY_S = 1.0

R = TypeVar("R")
T = TypeVar("T")


def _record(cls: type[R], data: dict[str, Any]) -> R:
    """A record from a response map; fields a newer server adds are ignored."""
    names = _FIELD_NAMES.get(cls)
    if names is None:  # once per class: every claim and every row read passes through here
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in fields(cls))  # type: ignore[arg-type]
    return cls(**{k: v for k, v in data.items() if k in names})


_FIELD_NAMES: dict[type[Any], frozenset[str]] = {}


def _submit_item(r: SubmitRequest) -> dict[str, Any]:
    item: dict[str, Any] = {
        "payload": r.payload,
        "key": r.key,
        "priority": r.priority,
        "max_attempts": r.max_attempts,
        "timeout_s": r.timeout_s,
    }
    if r.host is not None:  # only when there is one: a server before locality refuses it
        item["host"] = r.host
    if r.id is not None:
        item["id"] = r.id
    if r.resources is not None:  # likewise
        item["resources"] = r.resources
    if r.max_preemptions is not None:  # likewise: a server before issue 35 refuses it
        item["max_preemptions"] = r.max_preemptions
    if r.objects:  # likewise: a server before objects refuses the field
        item["objects"] = [{"url": o.url, "key": o.key, "size": o.size} for o in r.objects]
    if r.map_id is not None:
        item["map_id"] = r.map_id
    if r.delay_s is not None:
        item["delay_s"] = r.delay_s
    if r.at is not None:
        item["at"] = r.at
    return item


def split_urls(text: str) -> list[str]:
    """`LAKESHORE_URL` or `--url` may list replicas, comma-separated: `http://a:8765,http://b:8765`."""
    urls = [u.strip() for u in text.split(",")]
    if not all(urls):
        raise InvalidArgument(
            f"invalid control plane URL list {text[:200]!r}: an empty entry; separate replicas "
            "with single commas (http://a:8765,http://b:8765)"
        )
    return urls


class _Unreachable(Exception):
    """A request that got no answer from a replica (refused, reset, timed out)."""


class _Replica:
    """One control plane URL and its connections: the lean path where it can, else httpx."""

    def __init__(
        self,
        url: str,
        headers: dict[str, str],
        timeout_s: float,
        transport: httpx.BaseTransport | None,
        tls: ssl.SSLContext | None,
    ) -> None:
        self.url = url
        self._settings = (headers, timeout_s, transport, tls)
        self._client: httpx.Client | None = None
        self._making = threading.Lock()
        # The lean path (http11.py) for http and https; httpx for proxies and test transports.
        self.fast = (
            http11.Connections(url, headers, tls if url.startswith("https:") else None)
            if transport is None and http11.usable(url)
            else None
        )

    @property
    def client(self) -> httpx.Client:
        """Made at its first use: a plane on the lean path may never need it (a proxy, a test
        transport or the object tier over TLS does)."""
        with self._making:  # threads share a replica: one client, never a second left open
            if self._client is None:
                import httpx

                headers, timeout_s, transport, tls = self._settings
                self._client = httpx.Client(
                    base_url=self.url,
                    headers=headers,
                    timeout=timeout_s,
                    transport=transport,
                    verify=tls if tls is not None else True,
                )
            return self._client

    def close(self) -> None:
        with self._making:
            if self._client is not None:
                self._client.close()
        if self.fast is not None:
            self.fast.close()


#: Requests that do the same thing when sent twice, so a replica that did not answer may have
#: done it and the next is asked too: reads, submits and frame posts (their ids are minted
#: here), acks, ends, cancels, lease renewals and heartbeats. A claim, a nack or a release is not
#: sent twice: its caller retries, and a lost claim only returns its job at the lease's end.
_REPEATABLE_POSTS = re.compile(
    r".*/(queues/[^/]+/invocations|acks|invocations/[^/]+/(ack|end|cancel|frames|checkpoint|cause)"
    r"|leases/renew"
    r"|workers/[^/]+/heartbeat|topics/[^/]+/[^/]+/frames)"
)


def _repeatable(method: str, path: str) -> bool:
    return method in http11.IDEMPOTENT or (
        method == "POST" and bool(_REPEATABLE_POSTS.fullmatch(path))
    )


def _why(exc: BaseException) -> str:
    """Why a request got no answer, in words: "Connection refused", not the exception's repr."""
    text = getattr(exc, "strerror", None) or str(exc)
    return text if text else type(exc).__name__


def _mint_id() -> str:
    """A job's id, as the plane would mint it: a ULID (python-ulid, imported at the first)."""
    from ulid import ULID

    return str(ULID())


def check_url(url: str) -> str:
    """A control plane's base URL, or InvalidArgument naming what is wrong and the form it takes.

    urlsplit drops tabs and newlines silently, so a URL with any whitespace or control character
    is refused before it is parsed; a host name is ASCII (punycode for an international one).
    """
    form = "use http://HOST[:PORT] or https://HOST[:PORT]"
    if not url.isascii() or not url.isprintable() or any(c.isspace() for c in url):
        raise InvalidArgument(
            f"invalid control plane URL {url[:200]!r}: it holds whitespace, a control or a "
            f"non-ASCII character; {form}"
        )
    try:
        parts = urlsplit(url)
        _ = parts.port  # parsed here: "Port out of range" is a ValueError
    except ValueError as exc:
        raise InvalidArgument(f"invalid control plane URL {url[:200]!r} ({exc}); {form}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidArgument(f"invalid control plane URL {url[:200]!r}: {form}")
    return url


def check_token(token: str) -> str:
    """A bearer token rides in an HTTP header: printable ASCII, no spaces or line breaks.

    The message never repeats the token: it is a secret, and error lines end up in logs.
    """
    if not all("!" <= c <= "~" for c in token):
        raise InvalidArgument(
            "the token must be printable ASCII with no spaces or line breaks (it is sent in "
            "an HTTP header): check --token, LAKESHORE_TOKEN or the token file"
        )
    return token


def _pack(body: dict[str, Any]) -> bytes:
    """The request body as msgpack; a value msgpack cannot carry is refused, naming its field."""
    try:
        return msgpack.packb(body, use_bin_type=True)  # type: ignore[no-any-return]
    except (OverflowError, UnicodeEncodeError, ValueError, TypeError) as exc:
        where, why = unsendable(body, "") or ("the request body", f"{type(exc).__name__}: {exc}")
        raise InvalidArgument(f"{where} {why}") from None


def _segment(value: str) -> str:
    try:
        return quote(value, safe="")
    except UnicodeEncodeError:  # a lone surrogate (a shell argument that was not UTF-8)
        raise InvalidArgument(
            f"{value[:200]!r} holds a lone surrogate, which is not Unicode text"
        ) from None


def _check_params(params: dict[str, Any] | None) -> None:
    for key, value in (params or {}).items():
        if isinstance(value, str) and unsendable(value, key):
            raise InvalidArgument(
                f"query parameter '{key}' holds a lone surrogate, which is not Unicode text"
            )


class HttpPlane:
    """A plane behind `lakeshore server`: `HttpPlane("http://127.0.0.1:8765")`.

    `token` defaults to LAKESHORE_TOKEN, then the file `$LAKESHORE_HOME/token` (written by the
    server's first start) when every URL reaches the server that wrote it (home_token.py);
    `namespace` defaults to LAKESHORE_NAMESPACE, then `default`. For an https URL, `verify`
    says which certificates to trust (tls.py): None reads LAKESHORE_CA_BUNDLE, else the public
    roots.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        namespace: str | None = None,
        timeout_s: float = REQUEST_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
        verify: Verify = None,
    ) -> None:
        base = url or env_url()
        if not base:
            raise InvalidArgument("HttpPlane needs a URL (or LAKESHORE_URL)")
        #: The control plane's replicas, in the order given: requests go to one until it cannot
        #: be reached, then to the next (`url` is the one in use).
        self.urls = tuple(check_url(u).rstrip("/") for u in split_urls(base))
        self._at = 0
        self._switch = threading.Lock()
        self.namespace = namespace or env_namespace()
        token = token or env_token()
        if not token:
            from .home_token import home_token  # the token file, its record: only when needed

            token = home_token(self.urls)
        headers = {"accept": MSGPACK, "user-agent": "lakeshore-sdk"}
        if token:
            headers["authorization"] = f"Bearer {check_token(token)}"
        self._timeout_s = timeout_s
        self._headers = headers  # also the object tier's (object_tier)
        self._prefix = f"/v1/namespaces/{_segment(self.namespace)}"
        # One TLS context for both paths, so they trust the same certificates (tls.py).
        https = any(u.startswith("https:") for u in self.urls)
        tls = tls_context(verify) if https else None
        self._replicas = [_Replica(u, headers, timeout_s, transport, tls) for u in self.urls]

    @property
    def url(self) -> str:
        """The replica requests go to now."""
        return self._replicas[self._at].url

    @property
    def _client(self) -> httpx.Client:
        return self._replicas[self._at].client

    @property
    def _fast(self) -> http11.Connections | None:
        return self._replicas[self._at].fast

    def __repr__(self) -> str:
        return f"{type(self).__name__}({','.join(self.urls)!r}, namespace={self.namespace!r})"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for replica in self._replicas:
            replica.close()

    def object_tier(self) -> PlaneTier:
        """This plane's objects (the plane tier, objects/plane.py): streamed up and down with
        this client's token, over the same transport choice as its other requests."""
        from ..objects.plane import PlaneTier  # the object store: not imported with the SDK

        # Plain http with no proxy: straight from and into the caller's buffers (http.client);
        # TLS, proxies and test transports: this client, which holds their settings.
        direct = self._fast is not None and self.url.startswith("http:")
        return PlaneTier(
            self.url,
            self.namespace,
            self._headers,
            client=None if direct else self._client,
            timeout_s=self._timeout_s,
        )

    # -- transport ----------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        params: dict[str, Any] | None = None,
        wait_s: float = 0.0,
        namespaced: bool = True,
    ) -> Any:
        """One call; sent again while the server is too busy to take its body.

        A `ServerBusy` (429) was refused before the server read a byte of the body, so sending
        it again is safe whatever it was; it is, after the server's hint (jittered, so that a
        fleet refused together does not return together), until the call's own timeout is
        spent. Any other refusal is raised at once: a 413 (`PayloadTooLarge`) would only be
        refused again.
        """
        url = (self._prefix + path) if namespaced else path
        content = _pack(body) if body is not None else None
        _check_params(params)
        try:
            return self._send(method, url, content, params, wait_s)
        except ServerBusy as busy:
            refused = busy
        deadline = Deadline(self._timeout_s)
        report = RetryReport(f"{method} {path.split('?')[0]}", "was refused unread")
        while True:
            pause = (refused.retry_after_s or BUSY_RETRY_S) * random.uniform(1.0, 1.5)
            if pause > deadline.remaining():
                raise ServerBusy(
                    f"{refused} (still refused after {self._timeout_s:g} s of retries)",
                    retry_after_s=refused.retry_after_s,
                ) from None
            report.retrying(refused, deadline.remaining())
            time.sleep(pause)  # no wake-up crosses the network: the server's hint is the signal
            try:
                return self._send(method, url, content, params, wait_s)
            except ServerBusy as busy:
                refused = busy

    def _send(
        self,
        method: str,
        url: str,
        content: bytes | None,
        params: dict[str, Any] | None,
        wait_s: float,
    ) -> Any:
        """One request to the replica in use; one that cannot be reached is left for the next,
        and the request goes there too when sending it twice is harmless (`_repeatable`)."""
        for tries in range(1, len(self._replicas) + 1):
            replica = self._replicas[self._at]
            try:
                return self._send_to(replica, method, url, content, params, wait_s)
            except _Unreachable as exc:
                self._fail_over(replica)
                if tries == len(self._replicas) or not _repeatable(method, url):
                    raise Unavailable(str(exc)) from exc.__cause__
        raise AssertionError("unreachable: the last try raises")

    def _fail_over(self, replica: _Replica) -> None:
        with self._switch:  # another thread may have moved on already
            if self._replicas[self._at] is replica:
                self._at = (self._at + 1) % len(self._replicas)

    def _send_to(
        self,
        replica: _Replica,
        method: str,
        url: str,
        content: bytes | None,
        params: dict[str, Any] | None,
        wait_s: float,
    ) -> Any:
        headers = {"content-type": MSGPACK} if content is not None else None
        timeout = wait_s + WAIT_MARGIN_S if wait_s > 0 else self._timeout_s
        if replica.fast is not None:
            try:
                status, content_type, raw = replica.fast.request(
                    method, url + http11.query_string(params), content, headers, timeout
                )
            except ssl.SSLCertVerificationError as exc:
                raise Unavailable(untrusted_message(replica.url, exc)) from None
            except (OSError, http.client.HTTPException) as exc:
                raise _Unreachable(
                    f"cannot reach the control plane at {replica.url}: {_why(exc)}"
                ) from exc
        else:
            client = replica.client
            import httpx  # loaded with the client above

            try:
                response = client.request(
                    method, url, content=content, headers=headers, params=params, timeout=timeout
                )
            except httpx.HTTPError as exc:
                raise _Unreachable(
                    f"cannot reach the control plane at {replica.url}: {exc}"
                ) from exc
            status = response.status_code
            content_type = response.headers.get("content-type", "")
            raw = response.content
        if status == 204:
            return None
        data = self._decode(status, content_type, raw)
        if status >= 400:
            raise self._error(status, data)
        return data

    @staticmethod
    def _decode(status: int, content_type: str, raw: bytes) -> Any:
        try:
            if "json" in content_type:
                return json.loads(raw)
            return msgpack.unpackb(raw, raw=False)
        except Exception:
            if status >= 400:
                return None
            raise DispatchError(
                f"undecodable response from the control plane (HTTP {status})"
            ) from None

    @staticmethod
    def _error(status: int, data: Any) -> DispatchError:
        err = data.get("error") if isinstance(data, dict) else None
        if not isinstance(err, dict):  # a proxy's error page: a 502/503 is an outage
            cls = Unavailable if status >= 500 else ServerBusy if status == 429 else DispatchError
            return cls(f"control plane answered HTTP {status}")
        message = str(err.get("message", f"HTTP {status}"))
        cls = ERRORS_BY_CODE.get(str(err.get("code")), DispatchError)
        if cls is DispatchError:  # a code this client does not know: keep the HTTP status,
            unknown = DispatchError(message)  # so a 5xx still reads as transient
            unknown.status = status
            return unknown
        retry = err.get("retry_after_s")
        retry_after_s = float(retry) if isinstance(retry, (int, float)) else None
        if cls is QueueFullError:
            return QueueFullError(
                message, retry_after_s=retry_after_s, block=bool(err.get("block"))
            )
        if cls is ServerBusy:
            return ServerBusy(message, retry_after_s=retry_after_s)
        return cls(message)

    def _long_poll(self, wait_s: float, once: Callable[[float], T], done: Callable[[T], bool]) -> T:
        """Split a wait longer than the server's cap into several requests."""
        deadline = Deadline(wait_s)
        while True:
            value = once(min(deadline.remaining(), SERVER_WAIT_CAP_S))
            if done(value) or deadline.passed:
                return value

    # -- producers ----------------------------------------------------------------------------

    def submit(
        self, queue: str, requests: Sequence[SubmitRequest], *, wait_s: float = 0.0
    ) -> list[str]:
        """One request; on a full `on_full: block` queue the server waits up to wait_s for room."""
        return list(self._post_submit(queue, requests, wait_s)["ids"])

    def submit_and_wait(
        self, queue: str, request: SubmitRequest, *, wait_s: float, block_s: float = 0.0
    ) -> Invocation:
        """One request that submits and then holds until the job ends (`?result_wait=`)."""
        deadline = Deadline(wait_s)
        data = self._post_submit(
            queue, [request], block_s, result_wait=min(max(wait_s, 0.0), SERVER_WAIT_CAP_S)
        )
        answer = data.get("invocation")
        if answer is not None and (inv := _record(Invocation, answer)).terminal:
            return inv
        return self.invocation(data["ids"][0], wait_s=deadline.remaining())

    def _post_submit(
        self,
        queue: str,
        requests: Sequence[SubmitRequest],
        block_s: float,
        *,
        result_wait: float = 0.0,
    ) -> dict[str, Any]:
        # Every job gets its id here, so a submit whose answer was lost (the connection dropped,
        # the server restarted) can be sent again: the plane answers with the jobs it made.
        items = [_submit_item(r if r.id else replace(r, id=_mint_id())) for r in requests]
        path = f"/queues/{_segment(queue)}/invocations"
        deadline = Deadline(block_s)
        while True:
            wait = min(deadline.remaining(), SERVER_WAIT_CAP_S)
            params: dict[str, Any] = {"wait": wait} if wait > 0 else {}
            if result_wait > 0:
                params["result_wait"] = result_wait
            try:
                data: dict[str, Any] = through_outages(
                    partial(
                        self._request,
                        "POST",
                        path,
                        {"items": items},
                        params=params or None,
                        wait_s=wait + result_wait,
                    ),
                    self._timeout_s,
                    what="submit",
                    why="is sent again with the ids minted here: the job is neither lost nor made "
                    "twice",
                )
                return data
            except QueueFullError as full:
                room_wait(full, deadline)  # raises unless the queue blocks and time is left

    def invocation(self, inv_id: str, *, wait_s: float = 0.0) -> Invocation:
        def once(wait: float) -> Invocation:
            data = self._request(
                "GET",
                f"/invocations/{_segment(inv_id)}",
                params={"wait": wait} if wait > 0 else None,
                wait_s=wait,
            )
            return _record(Invocation, data)

        return self._long_poll(wait_s, once, lambda inv: inv.terminal)

    def count(self, queue: str, state: str = "queued") -> int:
        data = self._request("GET", f"/queues/{_segment(queue)}/count", params={"state": state})
        return int(data["count"])

    def cancel(self, inv_id: str, *, kill: bool = False) -> bool:
        data = self._request("POST", f"/invocations/{_segment(inv_id)}/cancel", {"kill": kill})
        return bool(data["cancelled"])

    def _frames_path(self, channel: str) -> str:
        """A topic channel names its own namespace; an invocation's is this plane's."""
        if channel.startswith("topic:"):
            ns, _, rest = channel[len("topic:") :].partition("/")
            queue, _, name = rest.partition("/")
            if not (ns and queue and name):
                raise InvalidArgument(f"malformed topic channel {channel!r}")
            return f"/v1/namespaces/{_segment(ns)}/topics/{_segment(queue)}/{_segment(name)}/frames"
        return f"{self._prefix}/invocations/{_segment(channel)}/frames"

    def frames(self, channel: str, *, since: int = -1, wait_s: float = 0.0) -> list[Frame]:
        path = self._frames_path(channel)

        def once(wait: float) -> tuple[list[Frame], bool]:
            params: dict[str, Any] = {"since": since}
            if wait > 0:
                params["wait"] = wait
            data = self._request("GET", path, params=params, wait_s=wait, namespaced=False)
            frames = [_record(Frame, f) for f in data["frames"]]
            return frames, bool(data.get("ended"))

        # `ended`: the invocation finished with nothing after `since`; waiting more is pointless.
        frames, _ = self._long_poll(wait_s, once, lambda r: bool(r[0]) or r[1])
        return frames

    def post(
        self,
        channel: str,
        kind: str,
        value: bytes | None,
        *,
        lease: str | None = None,
        post_id: str | None = None,
    ) -> int:
        """Append a frame; the post carries an id (minted here if the caller has none), so it
        is sent again safely after a lost answer or to the next replica."""
        body = {"kind": kind, "value": value, "lease": lease, "id": post_id or _mint_id()}
        data = self._request("POST", self._frames_path(channel), body, namespaced=False)
        return int(data["seq"])

    def topic_channel(self, queue: str, name: str) -> str:
        return f"topic:{self.namespace}/{queue}/{name}"

    # -- workers ------------------------------------------------------------------------------

    def claim(
        self,
        queues: Sequence[str],
        *,
        worker: str,
        lease_s: float = 60.0,
        kind: str | None = None,
        temperature: float = 1.0,
        wait_s: float = 0.0,
        host: str | None = None,
        free: dict[str, Any] | None = None,
    ) -> Claim | None:
        """The next job or None: `claim_many` of one (one code path, one wire form)."""
        got = self.claim_many(
            queues,
            worker=worker,
            limit=1,
            lease_s=lease_s,
            kind=kind,
            temperature=temperature,
            wait_s=wait_s,
            host=host,
            free=free,
        )
        return got[0] if got else None

    def claim_many(
        self,
        queues: Sequence[str],
        *,
        worker: str,
        limit: int,
        lease_s: float = 60.0,
        kind: str | None = None,
        temperature: float = 1.0,
        wait_s: float = 0.0,
        host: str | None = None,
        free: dict[str, Any] | None = None,
    ) -> list[Claim]:
        def once(wait: float) -> list[Claim]:
            body = self._claim_body(queues, worker, limit, lease_s, wait, host)
            body.update(kind=kind, temperature=temperature)
            if free is not None:  # only when sent: a server before resources refuses it
                body["free"] = free
            data = self._request("POST", "/claims", body, wait_s=wait)
            return [_record(Claim, c) for c in data["claims"]]

        return self._long_poll(wait_s, once, bool)

    def ack_and_claim(
        self,
        acks: Sequence[Ack],
        queues: Sequence[str],
        *,
        worker: str,
        limit: int,
        lease_s: float = 60.0,
        kind: str | None = None,
        temperature: float = 1.0,
        wait_s: float = 0.0,
        host: str | None = None,
        free: dict[str, Any] | None = None,
    ) -> tuple[list[DispatchError | None], list[Claim]]:
        """One request: the server commits the acks (with the claim when a job is there)
        before it waits; a wait past its cap goes on as plain claims."""
        wait = min(wait_s, SERVER_WAIT_CAP_S)
        body = self._claim_body(queues, worker, limit, lease_s, wait, host)
        body.update(kind=kind, temperature=temperature)
        if free is not None:
            body["free"] = free
        body["acks"] = [{"id": a.id, "lease": a.lease, "result": a.result} for a in acks]
        data = self._request("POST", "/claims", body, wait_s=wait)
        errors = [None if e is None else self._item_error(e) for e in data["ack_errors"]]
        got = [_record(Claim, c) for c in data["claims"]]
        if not got and wait_s > wait:
            got = self.claim_many(
                queues,
                worker=worker,
                limit=limit,
                lease_s=lease_s,
                kind=kind,
                temperature=temperature,
                wait_s=wait_s - wait,
                host=host,
                free=free,
            )
        return errors, got

    @staticmethod
    def _claim_body(
        queues: Sequence[str],
        worker: str,
        limit: int,
        lease_s: float,
        wait: float,
        host: str | None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "queues": list(queues),
            "worker": worker,
            "limit": limit,
            "lease_s": lease_s,
            "wait": wait,
        }
        if host is not None:  # only when there is one: a server before locality takes it
            body["host"] = host
        return body

    def ack(self, inv_id: str, lease: str, result: bytes | None) -> None:
        self._request(
            "POST", f"/invocations/{_segment(inv_id)}/ack", {"lease": lease, "result": result}
        )

    def ack_many(self, acks: Sequence[Ack]) -> list[DispatchError | None]:
        items = [{"id": a.id, "lease": a.lease, "result": a.result} for a in acks]
        data = self._request("POST", "/acks", {"acks": items})
        return [None if e is None else self._item_error(e) for e in data["errors"]]

    @classmethod
    def _item_error(cls, err: dict[str, Any]) -> DispatchError:
        """One refusal inside a batch answer, as the error a single call would have raised."""
        status = ERRORS_BY_CODE.get(str(err.get("code")), DispatchError).status
        return cls._error(status, {"error": err})

    def nack(self, inv_id: str, lease: str, *, error: str, retry: bool = True) -> str:
        data = self._request(
            "POST",
            f"/invocations/{_segment(inv_id)}/nack",
            {"lease": lease, "error": storable_text(error), "retry": retry},
        )
        return str(data["state"])

    def end(
        self, inv_id: str, lease: str, *, state: str, error: str, cause: str | None = None
    ) -> None:
        body: dict[str, Any] = {"lease": lease, "state": state, "error": storable_text(error)}
        if cause is not None:  # only then: a server before it refuses the field
            body["cause"] = cause
        self._request("POST", f"/invocations/{_segment(inv_id)}/end", body)

    def release(
        self, inv_id: str, lease: str, *, outcome: str = "unrun", cause: str = "notice"
    ) -> bool:
        body: dict[str, Any] = {"lease": lease}
        if outcome != "unrun":  # only then: a server before issue 35 refuses the fields
            body |= {"outcome": outcome, "cause": cause}
        data = self._request("POST", f"/invocations/{_segment(inv_id)}/release", body)
        return bool(data["released"])

    def place(self, inv_id: str, lease: str, placement: dict[str, Any]) -> None:
        path = f"/invocations/{_segment(inv_id)}/placement"
        self._request("POST", path, {"lease": lease, "placement": placement})

    def note_cause(self, inv_id: str, lease: str, cause: str) -> bool:
        data = self._request(
            "POST", f"/invocations/{_segment(inv_id)}/cause", {"lease": lease, "cause": cause}
        )
        return bool(data["noted"])

    def checkpoint(self, inv_id: str, lease: str, checkpoint: bytes) -> bytes | None:
        data = self._request(
            "POST",
            f"/invocations/{_segment(inv_id)}/checkpoint",
            {"lease": lease, "checkpoint": checkpoint},
        )
        previous = data.get("previous")
        return None if previous is None else bytes(previous)

    def renew(self, leases: Sequence[str], lease_s: float) -> dict[str, bool]:
        if not leases:
            return {}
        data = self._request("POST", "/leases/renew", {"leases": list(leases), "lease_s": lease_s})
        return {str(k): bool(v) for k, v in data["leases"].items()}

    # -- queues -------------------------------------------------------------------------------

    def create_queue(self, name: str, **fields: Any) -> QueueInfo:
        return _record(QueueInfo, self._request("POST", "/queues", {"name": name, **fields}))

    def queue(self, name: str) -> QueueInfo:
        return _record(QueueInfo, self._request("GET", f"/queues/{_segment(name)}"))

    def queues(self, *, state: str | None = None) -> list[QueueInfo]:
        data = self._request("GET", "/queues", params={"state": state} if state else None)
        return [_record(QueueInfo, q) for q in data["queues"]]

    def patch_queue(self, name: str, changes: dict[str, Any]) -> QueueInfo:
        data = self._request(
            "PATCH", f"/queues/{_segment(name)}", dict(changes), params={"elasticity": "merge"}
        )
        return _record(QueueInfo, data)

    def set_queue_state(self, name: str, action: str) -> QueueInfo:
        if action not in ("archive", "unarchive", "drain"):
            raise InvalidArgument(f"unknown queue action '{action}'; use archive|unarchive|drain")
        return _record(QueueInfo, self._request("POST", f"/queues/{_segment(name)}/{action}"))

    def delete_queue(self, name: str, *, force: bool = False) -> None:
        self._request(
            "DELETE", f"/queues/{_segment(name)}", params={"force": "true"} if force else None
        )

    def events(self, name: str, *, limit: int = 50) -> list[dict[str, Any]]:
        data = self._request(
            "GET", f"/queues/{_segment(name)}/events", params={"verbose": "true", "limit": limit}
        )
        return list(data["events"])

    def stats(self, name: str) -> dict[str, Any]:
        return dict(self._request("GET", f"/queues/{_segment(name)}/stats"))

    # -- worker rows --------------------------------------------------------------------------

    def register_worker(self, name: str, **fields: Any) -> WorkerInfo:
        body = {"name": name, **fields}
        if "queues" in body:
            body["queues"] = list(body["queues"])
        return _record(WorkerInfo, self._request("POST", "/workers", body))

    def heartbeat(
        self, worker_id: str, load: dict[str, Any], *, state: str = "alive"
    ) -> WorkerInfo:
        data = self._request(
            "POST", f"/workers/{_segment(worker_id)}/heartbeat", {"load": load, "state": state}
        )
        return _record(WorkerInfo, data)

    def worker(self, ref: str) -> WorkerInfo:
        return _record(WorkerInfo, self._request("GET", f"/workers/{_segment(ref)}"))

    def workers(self) -> list[WorkerInfo]:
        data = self._request("GET", "/workers")
        return [_record(WorkerInfo, w) for w in data["workers"]]

    def update_worker_queues(
        self, ref: str, *, add: Sequence[str] = (), remove: Sequence[str] = ()
    ) -> WorkerInfo:
        data = self._request(
            "POST", f"/workers/{_segment(ref)}/queues", {"add": list(add), "remove": list(remove)}
        )
        return _record(WorkerInfo, data)

    def set_worker_state(self, ref: str, state: str) -> WorkerInfo:
        data = self._request("POST", f"/workers/{_segment(ref)}/state", {"state": state})
        return _record(WorkerInfo, data)

    # -- jobs ---------------------------------------------------------------------------------

    def invocations(
        self,
        *,
        queue: str | None = None,
        state: str | None = None,
        limit: int = 50,
        before: str | None = None,
        map_id: str | None = None,
    ) -> list[Invocation]:
        """Newest first; rows carry no result bytes (`invocation(id)` reads one with it)."""
        params: dict[str, Any] = {"limit": limit}
        filters = (("queue", queue), ("state", state), ("before", before), ("map", map_id))
        for key, value in filters:
            if value is not None:
                params[key] = value
        data = self._request("GET", "/invocations", params=params)
        return [_record(Invocation, row) for row in data["invocations"]]

    def retry(self, inv_id: str) -> Invocation:
        """Requeue a failed / killed / timeout invocation as a new attempt of the same id."""
        data = self._request("POST", f"/invocations/{_segment(inv_id)}/retry")
        return _record(Invocation, data)

    def replace_elasticity(self, name: str, elasticity: dict[str, Any]) -> QueueInfo:
        """Set a queue's whole elasticity object, its kind included (`lakeshore compose`).

        A PATCH whose elasticity names its kind replaces the object (the Queues page's rule);
        `patch_queue` sends `?elasticity=merge` instead, so it cannot do this.
        """
        body = {"elasticity": {**elasticity, "kind": elasticity.get("kind", "none")}}
        return _record(QueueInfo, self._request("PATCH", f"/queues/{_segment(name)}", body))

    def trim_retention(
        self,
        *,
        frames_older_than_s: float | None = None,
        invocations_older_than_s: float | None = None,
    ) -> Trimmed:
        """The server trims this namespace (POST /retention/trim); see plane/retention.py."""
        body = {
            "frames_older_than_s": frames_older_than_s,
            "invocations_older_than_s": invocations_older_than_s,
        }
        return Trimmed.from_public(self._request("POST", "/retention/trim", body))

    # -- named provider configs ---------------------------------------------------------------

    def add_provider(self, name: str, kind: str, config: dict[str, Any]) -> ProviderInfo:
        body = {"name": name, "kind": kind, "config": config}
        return _record(ProviderInfo, self._request("POST", "/providers", body))

    def providers(self) -> list[ProviderInfo]:
        data = self._request("GET", "/providers")
        return [_record(ProviderInfo, p) for p in data["providers"]]

    def provider(self, name: str) -> ProviderInfo:
        return _record(ProviderInfo, self._request("GET", f"/providers/{_segment(name)}"))

    def delete_provider(self, name: str) -> None:
        self._request("DELETE", f"/providers/{_segment(name)}")


#: The seeds' name for `HttpPlane`, kept: the same class.
HttpDispatch = HttpPlane


class HttpFleet:
    """The fleet routes of a server (`/v1/fleet`): what `lakeshore-controller --url` runs on.

    The same calls `SqlStore` answers on the database (`fleet`, `fleet_view`, `all_providers`,
    `set_worker_state`, `record_events`, leadership leases), across every namespace, so it needs
    an admin token.
    """

    def __init__(self, url: str, *, token: str | None = None) -> None:
        self._plane = HttpPlane(url, token=token)

    def __repr__(self) -> str:
        return f"HttpFleet({self._plane.url!r})"

    def close(self) -> None:
        self._plane.close()

    def _fleet(self) -> dict[str, Any]:
        data: dict[str, Any] = self._plane._request("GET", "/v1/fleet", namespaced=False)
        return data

    def fleet(self) -> tuple[dict[str, list[dict[str, Any]]], list[ProviderInfo]]:
        """Rows and provider configs in one request (a controller tick's one read)."""
        data = self._fleet()
        rows = {k: list(data[k]) for k in ("queues", "counts", "running", "workers")}
        return rows, [_record(ProviderInfo, p) for p in data["providers"]]

    def fleet_view(self) -> dict[str, list[dict[str, Any]]]:
        return self.fleet()[0]

    def all_providers(self) -> list[ProviderInfo]:
        return self.fleet()[1]

    def set_worker_state(self, ns: str, ref: str, state: str) -> WorkerInfo:
        body = {"namespace": ns, "ref": ref, "state": state}
        data = self._plane._request("POST", "/v1/fleet/workers", body, namespaced=False)
        return _record(WorkerInfo, data)

    def record_events(
        self, events: Sequence[tuple[str, str, str, dict[str, Any]]], now: float
    ) -> None:
        items = [{"namespace": n, "queue": q, "kind": k, "detail": d} for n, q, k, d in events]
        body = {"events": items, "now": now}
        self._plane._request("POST", "/v1/fleet/events", body, namespaced=False)

    def acquire_leadership(self, name: str, holder: str, ttl_s: float) -> bool:
        body = {"name": name, "holder": holder, "ttl_s": ttl_s}
        data = self._plane._request("POST", "/v1/fleet/leader", body, namespaced=False)
        return bool(data["leading"])

    def release_leadership(self, name: str, holder: str) -> None:
        body = {"name": name, "holder": holder, "release": True}
        self._plane._request("POST", "/v1/fleet/leader", body, namespaced=False)
