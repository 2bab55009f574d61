"""What the HTTP client refuses before a byte is sent: a URL that is not one, a token that cannot
ride in a header, a value msgpack cannot carry. Each is an InvalidArgument naming what was wrong
and what is allowed (never a ValueError, an OverflowError or a UnicodeEncodeError), and the token
itself is never repeated: error lines end up in logs.
"""

from __future__ import annotations

import httpx
import pytest

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.plane import HttpDispatch
from dreamlake.lakeshore.types import storable_text


def _refuse_everything(request: httpx.Request) -> httpx.Response:
    raise AssertionError(f"a request was sent: {request.method} {request.url}")


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://[::1", "Invalid IPv6 URL"),
        ("http://x:99999", "Port out of range"),
        ("ftp://x", "use http://HOST[:PORT]"),
        ("localhost:8765", "use http://HOST[:PORT]"),
        ("http://", "use http://HOST[:PORT]"),
        ("http://a\nb", "whitespace, a control"),
        ("http://x y", "whitespace, a control"),
        ("http://h\u0435st", "non-ASCII"),
    ],
)
def test_a_url_that_is_not_one_is_refused_naming_the_form(url: str, says: str) -> None:
    with pytest.raises(InvalidArgument, match="invalid control plane URL") as refused:
        HttpDispatch(url, token="lks_x")
    assert says in str(refused.value)


@pytest.mark.parametrize("token", ["lks_a\nb", "lks_t\u00f6k\u00e9n", "lks a", "lks_\x00"])
def test_a_token_that_cannot_ride_in_a_header_is_refused_without_repeating_it(token: str) -> None:
    with pytest.raises(InvalidArgument, match="printable ASCII") as refused:
        HttpDispatch("http://127.0.0.1:9", token=token)
    assert token not in str(refused.value)


def test_values_msgpack_cannot_carry_are_refused_naming_the_field() -> None:
    plane = HttpDispatch(
        "http://127.0.0.1:9", token="lks_x", transport=httpx.MockTransport(_refuse_everything)
    )
    with pytest.raises(InvalidArgument, match=r"field 'admission\.max_depth' is 10{30}"):
        plane.create_queue("deep", admission={"max_depth": 10**30})
    with pytest.raises(InvalidArgument, match="field 'description' holds a lone surrogate"):
        plane.create_queue("q", description="\ud800")
    with pytest.raises(InvalidArgument, match="lone surrogate"):
        plane.queue("q\udcff")  # a path segment: a shell argument that was not UTF-8
    with pytest.raises(InvalidArgument, match="query parameter 'before'"):
        plane.invocations(before="\udcff")


def test_a_workers_error_text_is_made_storable_not_refused() -> None:
    assert storable_text("plain") == "plain"
    assert storable_text("a\x00b") == "a\\x00b"
    assert storable_text("bad \udcff name") == "bad \\udcff name"
    assert storable_text("é ☃") == "é ☃"
