"""The Postgres connector: the plane for more than one box (several `lakeshore server` replicas).

Same schema, same statements, same semantics as SQLite: the shared `sql/queries.sql` runs through
the POSTGRES dialect, and `SqlStore` sits on top unchanged. What differs is what SQLite's single
writer used to give for free. Postgres runs transactions side by side under READ COMMITTED, so:

- claims pick their row with `FOR UPDATE SKIP LOCKED` (in the shared text): concurrent claimers
  take different rows instead of queueing on one;
- a few statements take a transaction-scoped advisory lock first (`_LOCK_BEFORE`, SQL in
  `sql/postgres.sql`): appending a frame reads MAX(seq) and would collide with a concurrent
  append to the same channel; admission counts and then inserts;
- `lease_of` reads the row `FOR UPDATE` (shared text), so a sweep cannot re-dispatch a job
  between a worker's lease check and its write;
- the idempotent-key insert needs nothing more: `ON CONFLICT DO NOTHING` waits for a concurrent
  inserter of the same key to commit, and the following SELECT (a new snapshot) sees its id;
- migrations run under an advisory lock, so processes that start together apply them once.

Wake-ups travel as LISTEN/NOTIFY (`NotifyRelay`, postgres_notify.py): after the store commits a
write it bumps the process's `Waker`, the relay sends one NOTIFY per burst, and every other
connector on the same schema (other processes, other replicas) bumps its own `Waker`.

`advisory_leader` elects one holder of a name (the controller) with a session advisory lock.
How a URL becomes a connection (schema, pool size, each role's name, timeouts) is
postgres_connect.py's.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import urlsplit

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool

from dreamlake.lakeshore.errors import DispatchError, NotFound, Unavailable

from .connector import Row
from .postgres_connect import (
    channel_name,
    close_quietly,
    engine,
    for_role,
    parse_url,
    url_pool_size,
)
from .postgres_notify import MAX_WAKE_PAYLOAD as MAX_WAKE_PAYLOAD  # its home was here
from .postgres_notify import NotifyRelay
from .postgres_notify import decode_wake as decode_wake  # its home was here
from .postgres_notify import encode_wake as encode_wake  # its home was here
from .queries import POSTGRES, bind, migrations, queries, split_statements
from .wakeup import Waker

log = logging.getLogger("dreamlake.lakeshore.postgres")

#: Connections per connector for transactions (plus one listener and one notifier): enough for a
#: server replica's concurrent store calls; a caller past it waits up to pool_timeout_s.
DEFAULT_POOL_SIZE = 10
#: The oldest server the migrations run on (autovacuum_vacuum_insert_scale_factor is 13+).
MIN_SERVER_VERSION = 130000
#: A pooled connection idle longer than this is checked (one empty query) before it is lent:
#: after a server restart the first transaction gets a live connection, not an error.
CHECK_IDLE_S = 1.0

#: Statement -> (lock statement, the parameters that name the lock), taken before it in a
#: write transaction; once per lock per transaction.
_LOCK_BEFORE: dict[str, tuple[str, tuple[str, ...]]] = {
    "append_frame": ("lock_channel", ("channel",)),
    # post() and ack read the last frame to refuse writing past END: lock before that read.
    "last_frame": ("lock_channel", ("channel",)),
    "count_state": ("lock_admission", ("ns", "queue")),
    "get_bucket": ("lock_admission", ("ns", "queue")),
}


# -- transactions -------------------------------------------------------------------------------


#: What opens a write transaction; a non-durable one also skips the WAL flush at its COMMIT.
_BEGIN = ("BEGIN", None)
_NOT_DURABLE = ("SET LOCAL synchronous_commit TO OFF", None)

Statement = tuple[str, dict[str, Any] | None]
#: Pipelines need libpq 14+ (psycopg[binary] bundles one); against an older one the statements
#: of an opening go out one by one, as before.
_PIPELINES = psycopg.Pipeline.is_supported()


class PostgresTransaction:
    """Named statements on one pooled connection inside its transaction.

    A write transaction's BEGIN (and its setting, and any advisory lock a statement needs first)
    goes out in one pipeline with its first statement: one round trip where there were two or
    three, which counts most where Postgres is across a network (pipeline mode costs a few
    syscalls more). A transaction that ran no statement sent nothing, and commits nothing.
    """

    def __init__(
        self, conn: psycopg.Connection[DictRow], *, write: bool, opening: tuple[Statement, ...] = ()
    ) -> None:
        self._conn = conn
        self._write = write
        self._queries = queries(POSTGRES)
        self._locks: set[tuple[Any, ...]] = set()
        #: Sent ahead of the first statement; empty once sent.
        self._opening = opening

    @property
    def begun(self) -> bool:
        """Whether this write transaction sent its BEGIN (it did with its first statement)."""
        return self._write and not self._opening

    def all(self, query: str, **params: Any) -> list[Row]:
        cur = self._execute(query, params)
        return cur.fetchall() if cur.description else []

    def one(self, query: str, **params: Any) -> Row | None:
        cur = self._execute(query, params)
        return cur.fetchone() if cur.description else None

    def batch(self, statements: Sequence[tuple[str, Mapping[str, Any]]]) -> list[list[Row]]:
        """In one pipeline (one round trip), in order: the server runs each after the one
        before it, so a later statement sees an earlier one's writes and waits for its locks."""
        if not _PIPELINES:
            return [self.all(query, **params) for query, params in statements]
        bound = [
            (query, dict(params), bind(POSTGRES, self._queries[query], dict(params)))
            for query, params in statements
        ]  # every value checked before anything is sent
        cursors = []
        with self._conn.pipeline():
            for statement, args in self._opening:
                self._conn.execute(statement, args)
            self._opening = ()
            for query, params, (text, flat) in bound:
                for statement, args in self._lock_before(query, params):
                    self._conn.execute(statement, args)
                cursors.append(self._conn.execute(text, flat))
        return [cur.fetchall() if cur.description else [] for cur in cursors]

    def _execute(self, query: str, params: dict[str, Any]) -> psycopg.Cursor[DictRow]:
        text, flat = bind(POSTGRES, self._queries[query], params)  # checks the values first
        ahead = [*self._opening, *self._lock_before(query, params)]
        if not ahead:
            return self._conn.execute(text, flat)
        self._opening = ()
        with self._conn.pipeline() if _PIPELINES else contextlib.nullcontext():
            for statement, args in ahead:
                self._conn.execute(statement, args)
            return self._conn.execute(text, flat)

    def _lock_before(self, query: str, params: dict[str, Any]) -> list[Statement]:
        """The advisory lock `query` takes first, unless this transaction holds it already (a
        failed pipeline aborts the transaction, so the lock is counted as it is sent)."""
        if not self._write or query not in _LOCK_BEFORE:
            return []
        lock, names = _LOCK_BEFORE[query]
        key = (lock, *(params[n] for n in names))
        if key in self._locks:
            return []
        self._locks.add(key)
        return [engine(lock, **{n: params[n] for n in names})]


T = TypeVar("T")


class PostgresConnector:
    """The store's engine on PostgreSQL 13+: a connection pool, migrations, LISTEN/NOTIFY.

    `schema` (or `?schema=NAME` in the URL) keeps the plane in its own schema, created on first
    use: one database can hold several planes, and each test its own.
    """

    #: Every read is a round trip to the server: never on an event loop.
    reads_inline = False

    def run_if_free(self, fn: Callable[[], T], *, durable: bool = False) -> tuple[bool, T | None]:
        """Never here: every write is a round trip to the server (see SqliteConnector)."""
        return False, None

    dialect = POSTGRES

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        pool_size: int | None = None,
        min_pool_size: int = 1,
        pool_timeout_s: float = 30.0,
        create: bool = True,
    ) -> None:
        pool_size = pool_size or url_pool_size(url) or DEFAULT_POOL_SIZE
        self.conninfo, requested = parse_url(url, schema)
        try:
            self.schema = _migrate(self.conninfo, requested, create=create)
        except psycopg.OperationalError as exc:  # no server there, a refused login, no database
            where = conninfo_to_dict(self.conninfo)
            raise Unavailable(
                f"cannot reach PostgreSQL at {where.get('host', 'localhost')}:"
                f"{where.get('port', 5432)}/{where.get('dbname', '')}: "
                + " ".join(str(exc).split())
            ) from None
        self.channel = channel_name(self.schema)
        self.waker = Waker()
        #: Postgres checks its own pages (checksums, WAL replay): nothing for a client to find.
        self.problem: str | None = None
        self._used: dict[int, float] = {}
        self._pool: ConnectionPool[psycopg.Connection[DictRow]] = ConnectionPool(
            for_role(self.conninfo, "pool", self.schema),
            connection_class=psycopg.Connection[DictRow],
            kwargs={"autocommit": True, "row_factory": dict_row},
            min_size=min(min_pool_size, pool_size),
            max_size=pool_size,
            timeout=pool_timeout_s,
            check=self._check,
            name=f"lakeshore-{self.schema}",
            open=True,
        )
        self.relay = NotifyRelay(self.conninfo, self.schema)
        self.waker.relay_through(self.relay)

    def quick_check(self) -> str | None:
        return None

    def __repr__(self) -> str:
        return f"PostgresConnector(schema={self.schema!r})"

    @contextmanager
    def transaction(
        self, *, write: bool = True, durable: bool = True, sync_later: bool = False
    ) -> Iterator[PostgresTransaction]:
        """A pooled connection in a transaction: COMMIT on exit, ROLLBACK on an exception.

        `write` only decides whether the locks in `_LOCK_BEFORE` are taken: Postgres needs no
        up-front write lock (SQLite's BEGIN IMMEDIATE), rows are locked as they are written.
        `durable=False` commits without waiting for the WAL flush (synchronous_commit off for
        this transaction only; a crash may undo it, never corrupt it). `sync_later` changes
        nothing: the commit waits for its WAL flush as any durable one does, so nothing is ever
        owed. (A later synchronous commit flushes an earlier skipped one too, but only one that
        began after it returned, on whichever connection or replica: that bookkeeping is not
        built here.)

        A read (`write=False`) runs its statements on their own, without BEGIN and COMMIT: two
        round trips fewer for every result a producer reads. Under READ COMMITTED, the level
        the plane runs at, each statement of a transaction takes its own snapshot anyway, so
        a read sees exactly what it would have seen inside one.
        """
        try:
            with self._pool.connection() as conn:
                try:
                    if not write:
                        yield PostgresTransaction(conn, write=False)
                        return
                    opening = (_BEGIN,) if durable else (_BEGIN, _NOT_DURABLE)
                    tx = PostgresTransaction(conn, write=True, opening=opening)
                    try:
                        yield tx
                    except BaseException:
                        if tx.begun:
                            _roll_back(conn)
                        raise
                    if tx.begun:
                        conn.execute("COMMIT")
                finally:
                    self._used[id(conn)] = time.monotonic()
        except psycopg.OperationalError as exc:
            # A cut connection, a pool that cannot reach the server, a deadlock victim: an
            # outage, not a bug. 503 over HTTP, which clients retry; the pool drops a broken one.
            raise Unavailable(
                f"the store could not complete the transaction, retry: {type(exc).__name__}: {exc}"
            ) from exc

    def mark(self) -> int:
        return 0  # every durable commit is flushed at COMMIT: nothing is ever owed

    def synced(self, mark: int) -> bool:
        return True

    def sync(self, mark: int) -> None:
        return None

    def _check(self, conn: psycopg.Connection[DictRow]) -> None:
        if time.monotonic() - self._used.get(id(conn), 0.0) > CHECK_IDLE_S:
            ConnectionPool.check_connection(conn)

    def close(self) -> None:
        try:
            self.waker.close()
        finally:
            self._pool.close()


def _migrate(conninfo: str, schema: str | None, *, create: bool = True) -> str:
    """Apply the missing migrations under an advisory lock; returns the plane's schema.

    A direct connection rather than the pool: an unreachable server fails here at once, with
    libpq's own message, instead of after the pool's timeout. `create=False` refuses a schema
    that holds no plane yet (a reader of an existing plane must not make an empty one).
    """
    with psycopg.connect(for_role(conninfo, "migrate", schema), autocommit=True) as conn:
        if conn.info.server_version < MIN_SERVER_VERSION:
            raise DispatchError(
                f"Lakeshore needs PostgreSQL 13 or newer; this server is "
                f"{conn.info.parameter_status('server_version') or conn.info.server_version}"
            )
        with conn.transaction():
            if schema is None:
                row = conn.execute("SELECT current_schema()").fetchone()
                if row is None or row[0] is None:
                    raise DispatchError(
                        "no schema to create the plane in: add ?schema=NAME to the URL"
                    )
                schema = str(row[0])
            conn.execute(*engine("lock_migrations", schema=schema))
            if not create and not _has_plane(conn, schema):
                raise NotFound(
                    f"no Lakeshore plane in schema '{schema}' of this database: this command "
                    "reads an existing plane and creates none; check the URL's ?schema="
                )
            exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
            if exists.fetchone() is None:  # CREATE SCHEMA needs CREATE on the database, even
                # with IF NOT EXISTS: a role given only a ready-made schema must not get here
                conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY)")
            done = {r[0] for r in conn.execute("SELECT version FROM schema_version")}
            for version, text in migrations(POSTGRES):
                if version in done:
                    continue
                for statement in split_statements(text):
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_version VALUES (%s)", (version,))
    return schema


def _has_plane(conn: psycopg.Connection[Any], schema: str) -> bool:
    found = conn.execute(
        "SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = 'schema_version'",
        (schema,),
    )
    return found.fetchone() is not None


def _roll_back(conn: psycopg.Connection[Any]) -> None:
    """End a failed transaction without hiding why it failed: on a broken connection the
    ROLLBACK fails too, and the pool discards the connection when it comes back."""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        with contextlib.suppress(psycopg.OperationalError):
            conn.execute("ROLLBACK")


# -- leader election ----------------------------------------------------------------------------


class AdvisoryLeader:
    """One holder of `key` among every process on this database schema (the controller).

    A session advisory lock on a dedicated connection: Postgres releases it when the holder
    closes, exits or loses its connection, so a dead leader is replaced without any timeout of
    ours. The flip side: a leader whose connection silently died is no longer the leader, and
    learns it only by asking; so call `try_acquire()` before acting (it costs one round trip),
    and read `is_leader` only for display.
    """

    def __init__(self, url: str, key: str, *, schema: str | None = None) -> None:
        self._conninfo, self.schema = parse_url(url, schema)
        self.key = key
        self._conn: psycopg.Connection[Any] | None = None
        self._held = False
        #: Why the last attempt failed to reach the server, if it did.
        self.last_error: Exception | None = None
        try:
            self.try_acquire()
        except BaseException:
            self.close()  # nobody gets this object to close: do not leak its connection
            raise

    @property
    def backend_pid(self) -> int | None:
        """The server process holding the lock (for logs and pg_stat_activity)."""
        return self._conn.info.backend_pid if self._conn is not None else None

    @property
    def is_leader(self) -> bool:
        """What the last `try_acquire()` found, and the connection not known to be dead."""
        return self._held and self._conn is not None and not self._conn.closed

    def try_acquire(self) -> bool:
        """Take the lock if it is free, or confirm this session (so the lock) is still alive."""
        try:
            if self._conn is None or self._conn.closed:
                self._held = False
                self._conn = psycopg.connect(
                    for_role(self._conninfo, "leader", self.schema), autocommit=True
                )
            if self._held:
                self._conn.execute("SELECT 1")
            else:
                row = self._conn.execute(
                    *engine("try_leader", schema=self.schema, key=self.key)
                ).fetchone()
                self._held = bool(row and row[0])
            self.last_error = None
        except psycopg.OperationalError as exc:
            self.last_error = exc
            self._held = False
            close_quietly(self._conn)
            self._conn = None
        return self._held

    def release(self) -> None:
        """Step down but keep the connection (a later try_acquire may win again)."""
        if self._held and self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.execute(*engine("release_leader", schema=self.schema, key=self.key))
        self._held = False

    def close(self) -> None:
        """Step down and drop the connection; the next contender can win as soon as this returns.

        The lock is unlocked explicitly first: closing the connection alone releases it only
        when the server's backend has processed the disconnect and exited, which lags the
        client's close, so a contender asking right after would still lose. Only when the
        connection is already broken (unlock impossible) does the hand-off wait for the server
        to notice, as it does for a leader that died.
        """
        try:
            self.release()
        finally:
            close_quietly(self._conn)
            self._conn = None

    def __enter__(self) -> AdvisoryLeader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def advisory_leader(url: str, key: str, *, schema: str | None = None) -> AdvisoryLeader:
    """Contend for `key` now; `.is_leader` says whether this process won."""
    return AdvisoryLeader(url, key, schema=schema)


# -- scratch schemas (tests, benchmarks) ---------------------------------------------------------


@contextmanager
def scratch_schema(url: str, prefix: str = "lakeshore_scratch") -> Iterator[str]:
    """A fresh, empty schema, dropped with everything in it on exit; yields the URL selecting it.

    For tests and benchmarks that share one database: each gets its own plane, none cleans up
    after another.
    """
    name = f"{prefix}_{secrets.token_hex(6)}"
    conninfo, _ = parse_url(url)
    sep = "&" if urlsplit(url).query else "?"
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    try:
        yield f"{url}{sep}schema={name}"
    finally:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
