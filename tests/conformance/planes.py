"""The planes the conformance suite runs against: add one by adding a factory to `PLANES`.

A factory takes the test's `tmp_path` and the session's `PeerPool` and is a context manager that
yields a `PlaneEnv`:

- `dispatch`: the plane this (the test) process talks to;
- `peer_spec`: how a second process opens the *same* plane (see `peer.open_plane`), or None
  when the plane lives only in this process;
- `peer`: the worker/producer on the other side; a `RemotePeer` process when `peer_spec` is
  set, else a `LocalPeer` on `dispatch`.

Planes to come (added by whoever lands them): `http-sqlite` (a `lakeshore server` over a SQLite
file, `HttpDispatch` here, peer spec `{"kind": "http", "url": ..., "token": ...}`), `postgres`
(`Dispatch("postgresql://...")`, peer spec `{"kind": "postgres", "target": dsn}`) and
`http-postgres`. Mark them with `pytest.mark.postgres` where they need the server.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from peer import LocalPeer, PeerApi, RemotePeer

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane.base import Plane
from dreamlake.lakeshore.plane.store import SqlStore

T = TypeVar("T")


class PeerPool:
    """Peer processes started on first use and kept for the session (a start costs ~0.15 s)."""

    def __init__(self, log_dir: Path) -> None:
        self._log_dir = log_dir
        self._peers: list[RemotePeer] = []
        self._resources = contextlib.ExitStack()
        self._shared: dict[str, Any] = {}

    def shared(self, key: str, factory: Callable[[Path], ContextManager[Any]]) -> Any:
        """A session-wide resource (a server), entered on first use and closed with the pool."""
        if key not in self._shared:
            directory = self._log_dir / key
            directory.mkdir(parents=True, exist_ok=True)
            self._shared[key] = self._resources.enter_context(factory(directory))
        return self._shared[key]

    def get(self, index: int = 0) -> RemotePeer:
        while len(self._peers) <= index:
            self._peers.append(self._spawn(len(self._peers)))
        if not self._peers[index].alive:
            self._peers[index].stop()
            self._peers[index] = self._spawn(index)
        return self._peers[index]

    def _spawn(self, index: int) -> RemotePeer:
        return RemotePeer(self._log_dir / f"peer-{index}.log")

    def close(self) -> None:
        for p in self._peers:
            p.stop()
        self._peers.clear()
        self._resources.close()


@dataclass
class PlaneEnv:
    name: str
    dispatch: Plane
    peer: PeerApi
    peer_spec: dict[str, Any] | None = None
    pool: PeerPool | None = field(default=None, repr=False)
    #: Verbs this plane does not offer (yet); tests that need one skip.
    missing: frozenset[str] = frozenset()
    #: The store behind an HTTP plane (its server's), for checks the API does not offer.
    store_url: str | None = None

    @property
    def multiprocess(self) -> bool:
        return self.peer_spec is not None

    def queue(self, name: str, **kw: Any) -> dls.SyncQueue:
        """A queue in the test process on this plane."""
        return dls.SyncQueue(name, dispatch=self.dispatch, **kw)

    @contextlib.contextmanager
    def extra_peers(self, n: int) -> Iterator[list[PeerApi]]:
        """`n` more peers on the same plane: processes when the plane allows, else local."""
        if self.peer_spec is None or self.pool is None:
            yield [LocalPeer(self.dispatch) for _ in range(n)]
            return
        peers = [self.pool.get(1 + i) for i in range(n)]
        for p in peers:
            p.call("open", spec=self.peer_spec)
        try:
            yield peers
        finally:
            for p in peers:
                p.call("close")

    def recount(self) -> list[dict[str, Any]]:
        """Where the plane's depth counters disagree with a recount of its rows ([]: exact),
        read on the store itself (an HTTP plane's through its server's store)."""
        return self.on_store(lambda store: list(store.recount_check()))

    def on_store(self, read: Callable[[SqlStore], T]) -> T:
        """`read` on the store behind the plane (an HTTP plane's: its server's), for checks
        the API does not offer."""
        store = getattr(self.dispatch, "store", None)
        if store is not None:
            return read(store)
        from dreamlake.lakeshore.plane.dispatch import open_store

        assert self.store_url is not None, f"{self.name} names no store to read"
        opened = open_store(self.store_url)
        try:
            return read(opened)
        finally:
            opened.close()

    @contextlib.contextmanager
    def in_namespace(self, namespace: str) -> Iterator[Plane]:
        """The same plane, with the same credentials, in another namespace."""
        d = self.dispatch
        if isinstance(d, dls.HttpDispatch):
            assert self.peer_spec is not None
            with dls.HttpDispatch(d.url, token=self.peer_spec["token"], namespace=namespace) as p:
                yield p
        elif isinstance(d, dls.Dispatch) and d.target == ":memory:":
            yield dls.Dispatch(d.store, namespace=namespace)  # the store stays the test's own
        else:
            assert isinstance(d, dls.Dispatch)
            with dls.Dispatch(d.target, namespace=namespace) as p:
                yield p

    def require(self, verb: str) -> None:
        if verb in self.missing:
            import pytest

            pytest.skip(f"{self.name} does not offer {verb} yet")


PlaneFactory = Callable[[Path, PeerPool], contextlib.AbstractContextManager[PlaneEnv]]


@contextlib.contextmanager
def memory_plane(tmp_path: Path, pool: PeerPool) -> Iterator[PlaneEnv]:
    with dls.Dispatch(":memory:") as d:
        yield PlaneEnv("memory", d, LocalPeer(d))


@contextlib.contextmanager
def sqlite_two_process_plane(tmp_path: Path, pool: PeerPool) -> Iterator[PlaneEnv]:
    """One SQLite file: this process holds a Dispatch on it, a peer process holds another.

    The file starts as a copy of one migrated once per session (what a fresh file holds after
    its migrations, with the owner-only mode the plane gives it), not migrated per test.
    """
    path = tmp_path / "db.sqlite"
    template: Path = pool.shared("sqlite-template", _sqlite_template)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(template.read_bytes())
    spec = {"kind": "sqlite", "target": str(path)}
    with dls.Dispatch(path) as d:
        peer = pool.get(0)
        peer.call("open", spec=spec)
        try:
            yield PlaneEnv("sqlite-2proc", d, peer, peer_spec=spec, pool=pool)
        finally:
            if peer.alive:
                peer.call("close")


@contextlib.contextmanager
def _sqlite_template(directory: Path) -> Iterator[Path]:
    """An empty plane's SQLite file, migrated and closed (so its WAL is folded in)."""
    from dreamlake.lakeshore.plane.dispatch import open_store

    path = directory / "template.sqlite"
    open_store(path).close()
    yield path


@contextlib.contextmanager
def postgres_plane(tmp_path: Path, pool: PeerPool) -> Iterator[PlaneEnv]:
    """An empty schema of its own on the test server, held by this process and by a peer
    process: fresh, or one an earlier test used, emptied (SchemaPool).

    No server: skips, or fails under CI=true (tests/support/postgres.py).
    """
    _support()
    schemas = pool.shared("postgres-schemas", _schema_pool)
    with schemas.schema() as url, dls.Dispatch(url) as d:
        spec = {"kind": "postgres", "target": url}
        peer = pool.get(0)
        peer.call("open", spec=spec)
        try:
            yield PlaneEnv("postgres", d, peer, peer_spec=spec, pool=pool)
        finally:
            if peer.alive:
                peer.call("close")


def _support() -> Any:
    root = str(Path(__file__).resolve().parents[2])
    if root not in sys.path:  # `tests.support` imports however pytest was started
        sys.path.insert(0, root)
    import tests.support as support

    return support


@contextlib.contextmanager
def _schema_pool(directory: Path) -> Iterator[Any]:
    """Schemas emptied and handed from test to test (tests/support/postgres.py, SchemaPool)."""
    from tests.support.postgres import SchemaPool

    schemas = SchemaPool("lakeshore_conf")
    try:
        yield schemas
    finally:
        schemas.close()


@contextlib.contextmanager
def _servers(directory: Path, store: str | None, replicas: int) -> Iterator[tuple[str, list[str]]]:
    """`replicas` servers on one store, sharing one LAKESHORE_HOME; yields (store, urls)."""
    from tests.support.server import running_server

    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(running_server(directory, store))[0] for _ in range(replicas)]
        yield store or str(directory / "lakeshore.db"), urls


_namespaces = itertools.count()


@contextlib.contextmanager
def _http_plane(name: str, pool: PeerPool, store_url: str, urls: list[str]) -> Iterator[PlaneEnv]:
    """A fresh namespace and token per test on long-lived servers: tests never see each other.

    The test process talks to the first server, its peer to the last (the same one unless
    there are replicas: then every worker-side verb crosses replicas).
    """
    from dreamlake.lakeshore.plane.dispatch import open_store

    ns = f"conf-{os.getpid()}-{next(_namespaces)}"
    store = open_store(store_url)
    try:
        store.add_namespace(ns)
        token = store.create_token(ns, label="conformance")
    finally:
        store.close()
    spec = {"kind": "http", "url": urls[-1], "token": token, "namespace": ns}
    with dls.HttpDispatch(urls[0], token=token, namespace=ns) as d:
        peer = pool.get(0)
        peer.call("open", spec=spec)
        try:
            yield PlaneEnv(name, d, peer, peer_spec=spec, pool=pool, store_url=store_url)
        finally:
            if peer.alive:
                peer.call("close")


@contextlib.contextmanager
def http_sqlite_plane(tmp_path: Path, pool: PeerPool) -> Iterator[PlaneEnv]:
    _support()
    store, urls = pool.shared("http-sqlite", lambda d: _servers(d, None, 1))
    with _http_plane("http-sqlite", pool, store, urls) as env:
        yield env


def _postgres_servers(replicas: int) -> Callable[[Path], ContextManager[Any]]:
    @contextlib.contextmanager
    def start(directory: Path) -> Iterator[tuple[str, list[str]]]:
        from tests.support.postgres import postgres_schema

        with postgres_schema("lakeshore_http") as url, _servers(directory, url, replicas) as s:
            yield s

    return start


@contextlib.contextmanager
def http_postgres_plane(tmp_path: Path, pool: PeerPool) -> Iterator[PlaneEnv]:
    _support()
    store, urls = pool.shared("http-postgres", _postgres_servers(1))
    with _http_plane("http-postgres", pool, store, urls) as env:
        yield env


@contextlib.contextmanager
def http_replicas_plane(tmp_path: Path, pool: PeerPool) -> Iterator[PlaneEnv]:
    """Two servers on one Postgres: submit on one, claim and settle on the other."""
    _support()
    store, urls = pool.shared("http-2replicas", _postgres_servers(2))
    with _http_plane("http-2replicas", pool, store, urls) as env:
        yield env


#: name -> factory. The `plane` fixture is parametrised over these keys, in this order.
PLANES: dict[str, PlaneFactory] = {
    "memory": memory_plane,
    "sqlite-2proc": sqlite_two_process_plane,
    "postgres": postgres_plane,
    "http-sqlite": http_sqlite_plane,
    "http-postgres": http_postgres_plane,
    "http-2replicas": http_replicas_plane,
}


def eventually(check: Callable[[], Any], *, timeout: float = 10.0, every: float = 0.02) -> Any:
    """Poll `check` until it returns something truthy; fail after `timeout` seconds.

    Only for what has no wake-up to wait on, such as a lease running out.
    """
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last value {value!r})")
        time.sleep(every)
