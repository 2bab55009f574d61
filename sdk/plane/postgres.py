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

Wake-ups travel as LISTEN/NOTIFY (`NotifyRelay`): after the store commits a write it bumps the
process's `Waker`, the relay sends one NOTIFY per burst, and every other connector on the same
schema (other processes, other replicas) bumps its own `Waker`.

`advisory_leader` elects one holder of a name (the controller) with a session advisory lock.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import re
import secrets
import select
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool

from dreamlake.lakeshore.errors import DispatchError, InvalidArgument, NotFound, Unavailable

from .connector import Row
from .queries import POSTGRES, bind, engine_queries, migrations, queries, split_statements
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
#: The listener re-checks its connection this often when no notification arrives.
LISTEN_HEALTH_S = 10.0
#: Reconnect backoff of the listener and the sender.
BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 5.0
#: At most one NOTIFY per this interval: a burst of commits wakes listeners once, a lone commit
#: at once.
NOTIFY_GAP_S = 0.001
#: How long close() (and interpreter exit) waits for a pending NOTIFY to go out.
FLUSH_S = 2.0
#: How old a sender's count of the other listeners may be (`NotifyRelay._others_listen`). A
#: listener that starts meanwhile announces itself (HELLO) to the listening processes at once;
#: a process that only submits learns of it by the next count, and until then the new
#: listener's waiters notice its commits at their safety poll.
LISTENERS_CHECK_S = 0.5
#: The key of a listener's announcement: it wakes no waiter (no queue or reader is named so).
HELLO = "*hello"
#: Defaults for every connection we open (the URL overrides them): a blackholed host fails the
#: connect in 10 s, and keepalives make the kernel give up on a silent server after about
#: idle + interval * count seconds, so a dead peer surfaces as an error, never a hang.
CONNECTION_DEFAULTS = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}

_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

#: Statement -> (lock statement, the parameters that name the lock), taken before it in a
#: write transaction; once per lock per transaction.
_LOCK_BEFORE: dict[str, tuple[str, tuple[str, ...]]] = {
    "append_frame": ("lock_channel", ("channel",)),
    # post() and ack read the last frame to refuse writing past END: lock before that read.
    "last_frame": ("lock_channel", ("channel",)),
    "count_state": ("lock_admission", ("ns", "queue")),
    "get_bucket": ("lock_admission", ("ns", "queue")),
}


# -- where to connect ---------------------------------------------------------------------------


def parse_url(url: str, schema: str | None = None) -> tuple[str, str | None]:
    """A libpq conninfo for `url` and the schema it selects (`schema=` wins over `?schema=`).

    libpq rejects parameters it does not know, so `?schema=` is taken out of the URL and turned
    into `options=-c search_path=<schema>` (appended to any options the URL already has);
    `?pool_size=` is ours too (see `url_pool_size`).
    """
    parts = urlsplit(url)
    kept: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name == "schema":
            schema = schema or value
        elif name != "pool_size":
            kept.append((name, value))
    # quote, not quote_plus: libpq reads '+' literally, only %XX is decoded
    params = conninfo_to_dict(urlunsplit(parts._replace(query=urlencode(kept, quote_via=quote))))
    if schema is not None:
        if not _SCHEMA.fullmatch(schema):
            raise InvalidArgument(
                f"schema must match {_SCHEMA.pattern} (it also names the NOTIFY channel), "
                f"got {schema!r}"
            )
        params["options"] = f"{params.get('options') or ''} -c search_path={schema}".strip()
    return make_conninfo("", **params), schema


def url_pool_size(url: str) -> int | None:
    """`?pool_size=N` in the URL: how `lakeshore server --store URL` sizes its pool."""
    for name, value in parse_qsl(urlsplit(url).query):
        if name == "pool_size":
            if not value.isdigit() or int(value) < 1:
                raise InvalidArgument(f"pool_size must be a positive integer, got {value!r}")
            return int(value)
    return None


def channel_name(schema: str) -> str:
    """The NOTIFY channel of one schema: at most 63 bytes, as Postgres identifiers are."""
    name = f"lakeshore_{schema}"
    if len(name.encode()) > 63:
        name = "lakeshore_" + hashlib.sha256(schema.encode()).hexdigest()[:32]
    return name


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
        return [_engine(lock, **{n: params[n] for n in names})]


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
            _for_role(self.conninfo, "pool", self.schema),
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
    with psycopg.connect(_for_role(conninfo, "migrate", schema), autocommit=True) as conn:
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
            conn.execute(*_engine("lock_migrations", schema=schema))
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


# -- wake-ups -----------------------------------------------------------------------------------


class NotifyRelay:
    """LISTEN/NOTIFY behind a `Waker`: the same duck type as `wakeup.CrossProcessWaker`.

    `send()` never blocks a writer on the database: it raises a request and a sender thread
    (its own connection, synchronous_commit off: a lost NOTIFY costs one safety poll, not data)
    sends one NOTIFY for every burst: the requests that arrived while the previous NOTIFY was in
    flight or less than NOTIFY_GAP_S ago. A request raised after a commit is always followed by
    a NOTIFY sent after it, so a woken listener sees that commit. The payload is this relay's
    token, so its own listener ignores the echo: the writer's process already woke its waiters
    locally.

    `listen()` starts (once) a listener thread on its own autocommit connection. After every
    (re)connect it bumps the waker once, so a waiter re-checks whatever it might have missed
    while nobody listened; a dropped connection is retried with backoff.

    A NOTIFY goes out only while another process listens on the plane (a replica, an embedded
    producer or daemon). One server alone with its HTTP daemons has nobody to tell, and its
    NOTIFY per ack was a tenth of a `q.call`'s CPU: the sender's thread, Postgres queueing
    and delivering it, and this process's own listener reading the echo it then ignored. The
    count of the others comes from pg_stat_activity (the listeners' application_name), at most
    LISTENERS_CHECK_S old; a listener announces itself when it starts, which resets the count
    of every listening process.
    """

    def __init__(self, conninfo: str, schema: str) -> None:
        self._conninfo = conninfo
        self.schema = schema
        self._channel = channel_name(schema)
        self._token = secrets.token_hex(8)
        self._cond = threading.Condition()
        self._requested = 0
        self._sent = 0
        #: What the requests not yet sent may have changed: work keys (and `READERS`), or None
        #: for anything. One NOTIFY carries their union, so another replica wakes only the
        #: waiters they concern (500 idle claims must not re-read on every commit elsewhere).
        self._pending: frozenset[str] | None = frozenset()
        self._closed = threading.Event()
        self._sender: threading.Thread | None = None
        self._listener: threading.Thread | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        #: Set while LISTEN is active (tests wait on it).
        self.listening = threading.Event()
        #: The listener's backend while it is connected, and the name every listener of this
        #: plane connects under (what `other_listeners` counts).
        self._listen_pid = 0
        self._listen_name = conninfo_to_dict(_for_role(conninfo, "listen", schema)).get(
            "application_name", ""
        )
        #: (when the others were counted, whether there were any): none counted yet.
        self._others: tuple[float, bool] = (-LISTENERS_CHECK_S, True)
        #: NOTIFYs sent, and sends left out because nobody else listened (tests).
        self.notified = 0
        self.skipped = 0
        _LIVE_RELAYS.add(self)
        _register_exit_flush()

    # -- the writer side -------------------------------------------------------------------

    def send(self, keys: frozenset[str] | None = None) -> None:
        if self._closed.is_set():
            return
        with self._cond:
            if self._requested == self._sent and self._last_count() is False:
                # What the sender thread would do with it, done here: waking that thread only
                # to count a skip cost the writer a thread switch and a turn of the GIL on the
                # path of every commit (on a server, between the commit and its answer).
                self._requested += 1
                self._sent += 1
                self.skipped += 1
                return
            if keys is None or self._pending is None:
                self._pending = None
            else:
                self._pending |= keys
            self._requested += 1
            if self._sender is None:
                self._sender = threading.Thread(
                    target=self._send_loop, name="lakeshore-pg-notify", daemon=True
                )
                self._sender.start()
            self._cond.notify_all()

    def flush(self, timeout: float = FLUSH_S) -> bool:
        """Wait until every send() so far went out as a NOTIFY (or was given up on)."""
        with self._cond:
            target = self._requested
            return self._cond.wait_for(lambda: self._sent >= target, timeout)

    def _send_loop(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        backoff = BACKOFF_FIRST_S
        last = -NOTIFY_GAP_S
        while True:
            outcome = ""  # counted below, under the lock: send() counts skips too
            with self._cond:
                self._cond.wait_for(lambda: self._requested > self._sent or self._closed.is_set())
                if self._requested == self._sent:
                    break  # closed with nothing left to send
                gap = last + NOTIFY_GAP_S - time.monotonic()
                if gap > 0:  # a burst: let it gather, then one NOTIFY covers it
                    self._cond.wait_for(self._closed.is_set, gap)
                target = self._requested
                keys, self._pending = self._pending, frozenset()
            payload = encode_wake(self._token, keys)
            try:
                if conn is None:
                    conn = self._connect("notify", "-c synchronous_commit=off")
                if self._others_listen(conn):
                    conn.execute(*_engine("notify", channel=self._channel, payload=payload))
                    outcome = "notified"
                else:
                    outcome = "skipped"
                last = time.monotonic()
                backoff = BACKOFF_FIRST_S
            except psycopg.Error as exc:
                log.warning(
                    "NOTIFY on %s failed (%s); waiters fall back to polling", self._channel, exc
                )
                _close_quietly(conn)
                conn = None
                if self._closed.wait(backoff):
                    target = self._requested  # closing: give up on what is pending
                backoff = min(backoff * 2, BACKOFF_MAX_S)
            with self._cond:
                if outcome == "notified":
                    self.notified += 1
                elif outcome == "skipped":
                    self.skipped += 1
                self._sent = max(self._sent, target)
                self._cond.notify_all()
        _close_quietly(conn)

    def _last_count(self) -> bool | None:
        """Whether others listened when last counted, or None once that count is
        LISTENERS_CHECK_S old."""
        counted_at, others = self._others
        return others if time.monotonic() - counted_at < LISTENERS_CHECK_S else None

    def _others_listen(self, conn: psycopg.Connection[Any]) -> bool:
        """Whether another process listens on this plane (counted at most LISTENERS_CHECK_S
        ago); True when the count cannot be had: a NOTIFY too many costs a re-check."""
        known = self._last_count()
        if known is not None:
            return known
        now = time.monotonic()
        try:
            row = conn.execute(
                *_engine("other_listeners", app=self._listen_name, own=self._listen_pid)
            ).fetchone()
        except psycopg.Error:
            return True
        others = bool(row and row[0])
        self._others = (now, others)
        return others

    # -- the waiter side -------------------------------------------------------------------

    def listen(self, waker: Waker) -> None:
        """Start receiving wake-ups for this process (once, on its first wait)."""
        if self._listener is None and not self._closed.is_set():
            self._start_listener(waker)

    def _start_listener(self, waker: Waker) -> None:
        with self._cond:
            if self._listener is None:
                self._listener = threading.Thread(
                    target=self._listen_loop,
                    args=(waker,),
                    name="lakeshore-pg-listen",
                    daemon=True,
                )
                self._listener.start()

    def _listen_loop(self, waker: Waker) -> None:
        backoff = BACKOFF_FIRST_S
        while not self._closed.is_set():
            try:
                with self._connect("listen") as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
                    self._listen_pid = conn.info.backend_pid
                    # Every listening process counts this one from now (`_others_listen`).
                    hello = encode_wake(self._token, frozenset({HELLO}))
                    conn.execute(*_engine("notify", channel=self._channel, payload=hello))
                    backoff = BACKOFF_FIRST_S
                    waker.notify(local_only=True)  # re-check what arrived while nobody listened
                    self.listening.set()
                    self._pump(conn, waker)
            except (psycopg.Error, OSError) as exc:
                if not self._closed.is_set():
                    log.warning("LISTEN %s lost (%s); reconnecting", self._channel, exc)
            finally:
                self.listening.clear()
                self._listen_pid = 0
            if self._closed.wait(backoff):
                break
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    def _pump(self, conn: psycopg.Connection[Any], waker: Waker) -> None:
        """Wait on the connection's socket and the close pipe; a readable socket is notifies."""
        while True:
            readable, _, _ = select.select(
                [conn.pgconn.socket, self._wake_r.fileno()], [], [], LISTEN_HEALTH_S
            )
            if self._closed.is_set():
                return
            if not readable:
                conn.execute("SELECT 1")  # a silent connection: prove it is alive
            keys: frozenset[str] | None = frozenset()
            woken = False
            for n in conn.notifies(timeout=0):
                token, theirs = decode_wake(n.payload)
                if token == self._token:
                    continue  # our own echo: this process woke its waiters already
                if theirs is not None and HELLO in theirs:
                    self._others = (time.monotonic(), True)  # a listener came: tell it too
                    continue
                woken = True
                keys = None if theirs is None or keys is None else keys | theirs
            if woken:
                # `keys` already holds READERS where readers should wake (Waker.notify added it).
                waker.notify(local_only=True, work=keys, reads=False)

    def _connect(self, role: str, options: str = "") -> psycopg.Connection[Any]:
        return psycopg.connect(
            _for_role(self._conninfo, role, self.schema, options), autocommit=True
        )

    def close(self) -> None:
        if self._closed.is_set():
            return
        self.flush()
        self._closed.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"!")
        with self._cond:
            self._cond.notify_all()
        for thread in (self._sender, self._listener):
            if thread is not None and thread is not threading.current_thread():
                thread.join(FLUSH_S)
        self._wake_r.close()
        self._wake_w.close()
        _LIVE_RELAYS.discard(self)


def _for_role(conninfo: str, role: str, schema: str | None, options: str = "") -> str:
    """`conninfo` for one of our connections: CONNECTION_DEFAULTS, and `application_name`
    "lakeshore-<role> <schema>" for pg_stat_activity; what the URL sets wins."""
    name = f"lakeshore-{role} {schema}" if schema else f"lakeshore-{role}"
    params = {**CONNECTION_DEFAULTS, "application_name": name[:63], **conninfo_to_dict(conninfo)}
    if options:
        params["options"] = f"{params.get('options') or ''} {options}".strip()
    return make_conninfo("", **params)


#: A NOTIFY payload is at most 8000 bytes; a burst whose keys would not fit says "anything".
MAX_WAKE_PAYLOAD = 7000


def encode_wake(token: str, keys: frozenset[str] | None) -> str:
    """`token` alone (anything may have changed) or `token` and the keys, one per line."""
    if keys is None:
        return token
    payload = "\n".join([token, "", *sorted(keys)])
    return payload if len(payload) <= MAX_WAKE_PAYLOAD else token


def decode_wake(payload: str) -> tuple[str, frozenset[str] | None]:
    """(sender token, keys or None): a payload from an older sender (a bare token) is None."""
    token, sep, rest = payload.partition("\n")
    if not sep:
        return token, None
    return token, frozenset(k for k in rest.split("\n") if k)


def _engine(name: str, **params: Any) -> tuple[str, dict[str, Any]]:
    """A statement of `sql/postgres.sql`, bound."""
    return bind(POSTGRES, engine_queries(POSTGRES)[name], params)


def _roll_back(conn: psycopg.Connection[Any]) -> None:
    """End a failed transaction without hiding why it failed: on a broken connection the
    ROLLBACK fails too, and the pool discards the connection when it comes back."""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        with contextlib.suppress(psycopg.OperationalError):
            conn.execute("ROLLBACK")


def _close_quietly(conn: psycopg.Connection[Any] | None) -> None:
    if conn is not None:
        with contextlib.suppress(psycopg.Error):
            conn.close()


_LIVE_RELAYS: weakref.WeakSet[NotifyRelay] = weakref.WeakSet()
_exit_hook = threading.Lock()
_exit_registered = False


def _register_exit_flush() -> None:
    """A script that submits and exits without close() still sends its last NOTIFY."""
    global _exit_registered
    with _exit_hook:
        if not _exit_registered:
            atexit.register(_flush_all)
            _exit_registered = True


def _flush_all() -> None:
    for relay in list(_LIVE_RELAYS):
        relay.flush()


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
                    _for_role(self._conninfo, "leader", self.schema), autocommit=True
                )
            if self._held:
                self._conn.execute("SELECT 1")
            else:
                row = self._conn.execute(
                    *_engine("try_leader", schema=self.schema, key=self.key)
                ).fetchone()
                self._held = bool(row and row[0])
            self.last_error = None
        except psycopg.OperationalError as exc:
            self.last_error = exc
            self._held = False
            _close_quietly(self._conn)
            self._conn = None
        return self._held

    def release(self) -> None:
        """Step down but keep the connection (a later try_acquire may win again)."""
        if self._held and self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.execute(*_engine("release_leader", schema=self.schema, key=self.key))
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
            _close_quietly(self._conn)
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
