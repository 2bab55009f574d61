"""Fixtures for tests against a real `lakeshore server` process.

`server` is one server for the session (its start costs about a second); tests stay independent
by working in a fresh namespace each (`tenant`, `http_plane`), never by sharing queue names.
`api` is a raw HTTP client speaking msgpack (or JSON) with status codes left to the test.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `tests.support` is importable however pytest was started
    sys.path.insert(0, str(ROOT))

from dreamlake.lakeshore.plane import HttpDispatch  # noqa: E402
from dreamlake.lakeshore.plane.dispatch import open_store  # noqa: E402
from tests.support.client import Api  # noqa: E402
from tests.support.server import running_server  # noqa: E402


@dataclass(frozen=True)
class Server:
    url: str
    token: str  # the admin token of namespace `default`
    home: Path

    @property
    def store_path(self) -> Path:
        return self.home / "lakeshore.db"


@dataclass(frozen=True)
class Tenant:
    namespace: str
    token: str


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("lakeshore-home")
    with running_server(home) as (url, token):
        yield Server(url, token, home)


_counter = iter(range(1_000_000))


@pytest.fixture
def make_tenant(server: Server) -> Callable[..., Tenant]:
    """A new namespace (optionally in an org) with its own token, made on the server's store."""

    def make(org: str | None = None, prefix: str = "ns") -> Tenant:
        ns = f"{prefix}-{next(_counter)}-{id(server) % 9973}"
        store = open_store(server.store_path)
        try:
            token = store.create_token(ns, org=org, label="test")
        finally:
            store.close()
        return Tenant(ns, token)

    return make


@pytest.fixture
def tenant(make_tenant: Callable[..., Tenant]) -> Tenant:
    return make_tenant()


@pytest.fixture
def http_plane(
    server: Server, make_tenant: Callable[..., Tenant]
) -> Iterator[Callable[..., HttpDispatch]]:
    """Factory: `http_plane()` is an HttpDispatch in a fresh namespace of the session server.

    `http_plane(namespace=...)` binds another client to a namespace made earlier (its token
    remembered), or to any namespace with an explicit `token`.
    """
    planes: list[HttpDispatch] = []
    tokens: dict[str, str] = {}

    def make(namespace: str | None = None, token: str | None = None) -> HttpDispatch:
        if namespace is None:
            t = make_tenant()
            namespace, tokens[t.namespace] = t.namespace, t.token
        token = token or tokens.get(namespace) or server.token
        plane = HttpDispatch(server.url, token=token, namespace=namespace)
        planes.append(plane)
        return plane

    yield make
    for plane in planes:
        plane.close()


@pytest.fixture
def api(server: Server, tenant: Tenant) -> Iterator[Api]:
    """A raw client holding the token of a fresh namespace; paths via `ns(...)`."""
    client = Api(server.url, tenant.token)
    yield client
    client.close()


@pytest.fixture
def ns(tenant: Tenant) -> Callable[[str], str]:
    """`ns("/queues")` -> `/v1/namespaces/<the test's namespace>/queues`."""
    return lambda path: f"/v1/namespaces/{tenant.namespace}{path}"
