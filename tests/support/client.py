"""A raw HTTP client for route tests: msgpack or JSON bodies, status codes left to the test."""

from __future__ import annotations

from typing import Any

import httpx
import msgpack


class Api:
    """Raw requests; `call` returns (status, decoded body) so tests assert on both."""

    def __init__(self, url: str, token: str | None) -> None:
        self.client = httpx.Client(base_url=url, timeout=30.0)
        self.token = token

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = "default",
        as_json: bool = False,
        params: dict[str, Any] | None = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        hdrs = {"accept": "application/json" if as_json else "application/msgpack"}
        tok = self.token if token == "default" else token
        if tok is not None:
            hdrs["authorization"] = f"Bearer {tok}"
        if body is not None:
            if as_json:
                content = httpx.Request("POST", "/", json=body).content
                hdrs["content-type"] = "application/json"
            else:
                content = msgpack.packb(body, use_bin_type=True)
                hdrs["content-type"] = "application/msgpack"
        hdrs.update(headers or {})
        return self.client.request(method, path, content=content, headers=hdrs, params=params)

    def call(self, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        response = self.request(method, path, body, **kw)
        return response.status_code, decode(response)

    def close(self) -> None:
        self.client.close()


def decode(response: httpx.Response) -> Any:
    if response.status_code == 204 or not response.content:
        return None
    if "json" in response.headers.get("content-type", ""):
        return response.json()
    return msgpack.unpackb(response.content, raw=False)
