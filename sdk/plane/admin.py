"""Namespaces, orgs and tokens over HTTP: the admin routes (server/routes_admin.py) from Python.

`HttpAdmin` has the same method names and answers as the store's (`SqlStore.list_namespaces`,
`create_token`, ...), so `lakeshore tokens` and `lakeshore namespaces` run one code path
whether they hold the database (on the control host) or a URL and an admin token (anywhere).

    with HttpAdmin("https://plane.example:8765", token=admin_token) as admin:
        secret = admin.create_token("team-a", scopes=["submit-data", "read"], expires_in_s=86400)
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from typing import Any, Protocol

from . import routes
from .http import HttpDispatch
from .routes import Route, Target


class Admin(Protocol):
    """What the admin verbs need; the store and `HttpAdmin` both provide it."""

    def list_namespaces(self) -> list[dict[str, object]]: ...
    def add_namespace(self, ns: str, org: str | None = None) -> None: ...
    def list_orgs(self) -> list[dict[str, object]]: ...
    def list_tokens(self) -> list[dict[str, object]]: ...
    def create_token(
        self,
        ns: str,
        *,
        label: str = "",
        org: str | None = None,
        admin: bool = False,
        scopes: Iterable[str] | None = None,
        expires_in_s: float | None = None,
    ) -> str: ...
    def revoke_token(self, digest_prefix: str) -> dict[str, object]: ...
    def close(self) -> None: ...


class HttpAdmin:
    """The admin routes of a control plane; `token` must hold the `admin` scope (else 403)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        verify: bool | str | ssl.SSLContext | None = None,
    ) -> None:
        # One request at a time over the SDK's transport: the same URL checks, token fallbacks,
        # TLS settings and error classes as every other call.
        self._http = HttpDispatch(url, token=token, verify=verify)

    def __enter__(self) -> HttpAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(self, to: Route | Target, body: dict[str, Any] | None = None) -> Any:
        return self._http._request(to, body)

    def list_namespaces(self) -> list[dict[str, object]]:
        return list(self._call(routes.NAMESPACES)["namespaces"])

    def add_namespace(self, ns: str, org: str | None = None) -> None:
        self._call(routes.ADD_NAMESPACE, {"name": ns, "org": org})

    def list_orgs(self) -> list[dict[str, object]]:
        return list(self._call(routes.ORGS)["orgs"])

    def list_tokens(self) -> list[dict[str, object]]:
        return list(self._call(routes.TOKENS)["tokens"])

    def create_token(
        self,
        ns: str,
        *,
        label: str = "",
        org: str | None = None,
        admin: bool = False,
        scopes: Iterable[str] | None = None,
        expires_in_s: float | None = None,
    ) -> str:
        body: dict[str, Any] = {"namespace": ns, "label": label, "org": org, "admin": admin}
        if scopes is not None:
            body["scopes"] = list(scopes)
        if expires_in_s is not None:
            body["expires_in_s"] = expires_in_s
        return str(self._call(routes.CREATE_TOKEN, body)["token"])

    def revoke_token(self, digest_prefix: str) -> dict[str, object]:
        return dict(self._call(routes.REVOKE_TOKEN.at(digest=digest_prefix.strip())))
