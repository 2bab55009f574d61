"""The HTTP plane's transport: replicas and their connections, failover, busy retries.

Every request of `HttpPlane` (http.py) goes through `HttpTransport._request`: over the lean
HTTP/1.1 path (http11.py) where it can, else an `httpx.Client`; to the replica in use, and on
to the next when one cannot be reached and sending twice is harmless; sent again after a
server's 429, which refused it unread. Long waits are split into long-polls the server's cap
allows. What goes in and comes out of a request is wire.py's.
"""

from __future__ import annotations

import http.client
import random
import ssl
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar
from urllib.parse import urlsplit

from dreamlake.lakeshore.errors import InvalidArgument, ServerBusy, Unavailable
from dreamlake.lakeshore.types import unsendable

from . import http11
from .routes import Route, Target
from .routes import segment as segment  # its home was here: importers keep their name
from .tls import untrusted_message
from .waiting import Deadline, RetryReport
from .wire import decode_answer, error_of, pack_body

if TYPE_CHECKING:
    import httpx

    from .channel import Channel

MSGPACK = "application/msgpack"
#: Whether a plane keeps a channel open (channel.py): not at all, for the server's pushes, or
#: for its requests as well.
ChannelMode = Literal["off", "push", "requests"]
CHANNEL_MODES: tuple[ChannelMode, ...] = ("off", "push", "requests")
#: The server holds a long-poll at most this long; a longer wait is split into several.
SERVER_WAIT_CAP_S = 60.0
#: Extra client time on top of a long-poll's wait, for the round trip and a busy server.
WAIT_MARGIN_S = 10.0
#: Timeout of a request that does not wait.
REQUEST_TIMEOUT_S = 30.0
#: How long to wait before sending again a request a busy server refused without a hint.
BUSY_RETRY_S = 1.0

T = TypeVar("T")


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


class Replica:
    """One control plane URL and its connections: the lean path where it can, else httpx."""

    def __init__(
        self,
        url: str,
        headers: dict[str, str],
        timeout_s: float,
        transport: httpx.BaseTransport | None,
        tls: ssl.SSLContext | None,
        channel: ChannelMode = "off",
    ) -> None:
        self.url = url
        self._settings = (headers, timeout_s, transport, tls)
        #: The daemon's one open channel to this replica (channel.py), where it asked for one
        #: and no test transport stands in for the network; `requests`: its requests go
        #: over it too while it is open.
        self.channel: Channel | None = None
        self.requests_over_channel = channel == "requests"
        if channel != "off" and transport is None:
            from .channel import Channel

            self.channel = Channel(url, headers, tls)
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
        if self.channel is not None:
            self.channel.close()


def _repeatable(route: Route) -> bool:
    """A replica that did not answer may have done the request: the next is asked too only
    when doing it twice is harmless (routes.py says which routes that is)."""
    return route.repeatable


def _why(exc: BaseException) -> str:
    """Why a request got no answer, in words: "Connection refused", not the exception's repr."""
    text = getattr(exc, "strerror", None) or str(exc)
    return text if text else type(exc).__name__


def check_url(url: str) -> str:
    """A control plane's base URL, or InvalidArgument naming what is wrong and the form it takes.

    urlsplit drops tabs and newlines silently, so a URL with any whitespace or control character
    is refused before it is parsed; a host name is ASCII (punycode for an international one).
    """
    form = "use http://HOST[:PORT] or https://HOST[:PORT]"
    # Printable ASCII leaves one whitespace character, the space: one C-speed test, not a
    # Python loop over a (hostile, 200k-character) value.
    if not url.isascii() or not url.isprintable() or " " in url:
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


def _check_params(params: dict[str, Any] | None) -> None:
    for key, value in (params or {}).items():
        if isinstance(value, str) and unsendable(value, key):
            raise InvalidArgument(
                f"query parameter '{key}' holds a lone surrogate, which is not Unicode text"
            )


class HttpTransport:
    """Requests to a control plane's replicas (mixed into `HttpPlane`, which sets the state
    declared here in its constructor)."""

    urls: tuple[str, ...]
    _replicas: list[Replica]
    _at: int
    _switch: threading.Lock
    _timeout_s: float
    #: The namespace a namespaced route's `{ns}` names unless the request names another.
    namespace: str

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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for replica in self._replicas:
            replica.close()

    # -- transport ----------------------------------------------------------------------------

    def _request(
        self,
        to: Route | Target,
        body: dict[str, Any] | None = None,
        *,
        params: dict[str, Any] | None = None,
        wait_s: float = 0.0,
    ) -> Any:
        """One call to a declared route (routes.py, `Route.at` for its segments); sent again
        while the server is too busy to take its body.

        A `ServerBusy` (429) was refused before the server read a byte of the body, so sending
        it again is safe whatever it was; it is, after the server's hint (jittered, so that a
        fleet refused together does not return together), until the call's own timeout is
        spent. Any other refusal is raised at once: a 413 (`PayloadTooLarge`) would only be
        refused again.
        """
        target = to if isinstance(to, Target) else to.at()
        route = target.route
        url = target.url_path(self.namespace)
        method = route.method
        content = pack_body(body) if body is not None else None
        _check_params(params)
        try:
            return self._send(route, url, content, params, wait_s)
        except ServerBusy as busy:
            refused = busy
        deadline = Deadline(self._timeout_s)
        report = RetryReport(f"{method} {url}", "was refused unread")
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
                return self._send(route, url, content, params, wait_s)
            except ServerBusy as busy:
                refused = busy

    def _send(
        self,
        route: Route,
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
                return self._send_to(replica, route.method, url, content, params, wait_s)
            except _Unreachable as exc:
                self._fail_over(replica)
                if tries == len(self._replicas) or not _repeatable(route):
                    raise Unavailable(str(exc)) from exc.__cause__
        raise AssertionError("unreachable: the last try raises")

    def _fail_over(self, replica: Replica) -> None:
        with self._switch:  # another thread may have moved on already
            if self._replicas[self._at] is replica:
                self._at = (self._at + 1) % len(self._replicas)

    def _send_to(
        self,
        replica: Replica,
        method: str,
        url: str,
        content: bytes | None,
        params: dict[str, Any] | None,
        wait_s: float,
    ) -> Any:
        headers = {"content-type": MSGPACK} if content is not None else None
        timeout = wait_s + WAIT_MARGIN_S if wait_s > 0 else self._timeout_s
        answer = self._over_channel(replica, method, url, content, params, timeout)
        if answer is not None:
            status, content_type, raw = answer
        elif replica.fast is not None:
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
        data = decode_answer(status, content_type, raw)
        if status >= 400:
            raise error_of(status, data)
        return data

    @staticmethod
    def _over_channel(
        replica: Replica,
        method: str,
        url: str,
        content: bytes | None,
        params: dict[str, Any] | None,
        timeout: float,
    ) -> tuple[int, str, bytes] | None:
        """The answer over the replica's channel, or None: no channel open now, so nothing was
        sent (the request goes over HTTP). A channel lost with the request on it is a
        connection lost: the request may have been done."""
        if replica.channel is None or not replica.requests_over_channel:
            return None
        from .channel import ChannelDown, ChannelLost

        try:
            return replica.channel.request(
                method, url + http11.query_string(params), content, timeout
            )
        except ChannelDown:
            return None
        except ChannelLost as exc:
            raise _Unreachable(f"cannot reach the control plane at {replica.url}: {exc}") from exc

    def _long_poll(self, wait_s: float, once: Callable[[float], T], done: Callable[[T], bool]) -> T:
        """Split a wait longer than the server's cap into several requests."""
        deadline = Deadline(wait_s)
        while True:
            value = once(min(deadline.remaining(), SERVER_WAIT_CAP_S))
            if done(value) or deadline.passed:
                return value
