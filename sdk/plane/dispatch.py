"""`LocalPlane`: a whole plane in this process, over SQLite (or Postgres), no server needed.

`Dispatch`, the seeds' name, is the same plane, except that `Dispatch()` with no target follows
LAKESHORE_URL to a server as the process default does.

It binds a store to one namespace and adds the blocking waits the SDK needs: a result that is not
ready yet, a claim on an empty queue, a stream between frames. Each wait sleeps on the store's
wake-up and re-checks; it never spins.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Self, TypeVar

from dreamlake.lakeshore import signing
from dreamlake.lakeshore.errors import DispatchError, InvalidArgument, NotFound, QueueFullError
from dreamlake.lakeshore.extras import needs_extra
from dreamlake.lakeshore.home import home
from dreamlake.lakeshore.types import (
    DEFAULT_NAMESPACE,
    DEFAULT_QUEUE,
    Ack,
    Claim,
    ClaimArgs,
    Frame,
    GangState,
    Invocation,
    QueueInfo,
    SubmitRequest,
    WorkerInfo,
    check_name,
)

from .env import box_plane_path, env_namespace, env_url
from .providers import ProviderInfo
from .retention import Trimmed
from .schedules import ScheduleInfo
from .store import SqlStore, topic_channel
from .waiting import Deadline, DrainingWorkers, room_wait
from .wakeup import reading, work_key

if TYPE_CHECKING:
    from .kill_watch import KillWatch

T = TypeVar("T")


#: A target that names a scheme (`http://...`), and the schemes that name a store.
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_STORE_SCHEMES = ("postgresql://", "postgres://", "sqlite:///")


def open_store(
    target: str | os.PathLike[str], *, durable: bool = True, create: bool = True
) -> SqlStore:
    """A store for `:memory:`, a SQLite path, or a `postgresql://` URL.

    `create=False` refuses a plane that does not exist yet (NotFound) instead of making it.
    """
    text = os.fspath(target)
    if _SCHEME.match(text) and not text.startswith(_STORE_SCHEMES):
        # Else a URL becomes a SQLite file under a folder named "http:", and a plane that
        # looks connected serves nobody.
        raise InvalidArgument(
            f"{text!r} is not a store: a store is ':memory:', a SQLite path, sqlite:///PATH or a "
            "postgresql:// URL; a server's http(s):// address is opened with HttpPlane(url) "
            "(or Dispatch(url))"
        )
    if text.startswith(("postgresql://", "postgres://")):
        with needs_extra("a postgresql:// store"):
            from .postgres import PostgresConnector

        return SqlStore(PostgresConnector(text, create=create))
    from .sqlite import SqliteConnector

    if text.startswith("sqlite:///"):
        text = text[len("sqlite:///") - 1 :] if text.startswith("sqlite:////") else text[10:]
    return SqlStore(SqliteConnector(text, durable=durable, create=create))


#: How often reads sweep expired leases and start deadlines when nothing else does (`_swept`):
#: the cadence of the server's sweeper.
READ_SWEEP_EVERY_S = 1.0


def own_namespaces() -> frozenset[str]:
    """The namespaces an embedded plane creates on open: `default` (as a control plane's first
    start does) and this process's own (LAKESHORE_NAMESPACE), so a fresh home works for
    either. Any other comes to exist on its first write (`LocalPlane._writing`)."""
    own = env_namespace()
    return frozenset({DEFAULT_NAMESPACE, own})


class LocalPlane:
    """A plane in this process: `LocalPlane()` the box's own SQLite file under LAKESHORE_HOME,
    `LocalPlane(":memory:")` for tests, a path or a `postgresql://` URL for another store. It is
    always what its name says, whatever the environment: `Dispatch()` is the one that follows
    LAKESHORE_URL to a server.

    It is never a private in-memory plane unless asked: a producer that wrote `LocalPlane()`
    meaning "this box's plane" reaches the daemons that serve it. Each call opens its own plane,
    so closing one never closes the process default.

    `durable=False` trades the last commits on power loss (not on a crash) for faster writes;
    see `sqlite.py`.
    """

    def __init__(
        self,
        target: str | os.PathLike[str] | SqlStore | None = None,
        *,
        namespace: str | None = None,
        durable: bool = True,
    ) -> None:
        if target is None:
            target = box_plane_path()
            if namespace is None:
                namespace = env_namespace()
        if namespace is None:
            namespace = DEFAULT_NAMESPACE
        self.store = target if isinstance(target, SqlStore) else open_store(target, durable=durable)
        self.target = "store" if isinstance(target, SqlStore) else os.fspath(target)
        self.namespace = namespace
        self._read_swept_at = 0.0
        self._draining = DrainingWorkers()
        self._kill_watches: list[KillWatch] = []
        #: Whether `namespace` is known to exist (namespaces are never deleted, so once is enough).
        self._ns_exists = False
        try:
            if not isinstance(target, SqlStore):  # sign as the server would, with its key if here
                self.store.signing_key = signing.load_key(home())
            check_name(namespace, "namespace")
            if namespace in own_namespaces():
                self._writing()
        except BaseException:
            if not isinstance(target, SqlStore):  # ours: a refused namespace leaks no socket
                self.store.close()
            raise

    def _reading(self) -> str:
        """This plane's namespace for a read, which never creates it: NotFound when it does not
        exist, as the control plane answers (a typo'd `--namespace` must not become a namespace
        with a `default` queue in it)."""
        if not self._ns_exists:
            if self.store.namespace(self.namespace) is None:
                raise NotFound(f"unknown namespace '{self.namespace}'")
            self._ns_exists = True
        return self.namespace

    def _writing(self) -> str:
        """This plane's namespace for a write, created if new: the embedded plane has no admin
        to create namespaces first, so the first submit, queue or worker in one makes it."""
        if not self._ns_exists:
            # Looked for first: every process opens its own namespaces (`own_namespaces`), and
            # a write transaction to learn that one exists waited behind any writer's commit.
            if self.store.namespace(self.namespace) is None:
                self.store.ensure_namespace(self.namespace)
            self._ns_exists = True
        return self.namespace

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.target!r}, namespace={self.namespace!r})"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for watch in self._kill_watches:
            watch.stop()
        self.store.close()

    def on_push(self, worker: str, push: Callable[[str], None]) -> None:
        """Call `push("renew")` when a kill is asked for a job `worker` runs, from any process
        on this store (kill_watch.py), as a server pushes it over a daemon's channel."""
        from .kill_watch import KillWatch

        self._kill_watches.append(KillWatch(self.store.waker, self.namespace, worker, push))

    def _swept(self) -> None:
        """Sweep expired leases and start deadlines before a read, at most every
        READ_SWEEP_EVERY_S: with no worker claiming (claims sweep on their way) and no server
        (whose sweeper runs on a timer), a job past its deadline would read `queued` forever."""
        now = time.monotonic()
        if now - self._read_swept_at >= READ_SWEEP_EVERY_S:
            self._read_swept_at = now
            self.store.sweep()

    def _wait_for(
        self,
        fetch: Callable[[], T],
        ready: Callable[[T], bool],
        wait_s: float,
        *,
        work: Iterable[str],
        first: Callable[[], T] | None = None,
    ) -> T:
        """`fetch` until `ready`, sleeping between on wake-ups under `work` (`Waker.wait`).
        `first`, when given, is the first fetch: one that also writes (an ack riding on a
        claim) and so must not be repeated."""
        deadline = Deadline(wait_s)
        waker = self.store.waker
        if wait_s > 0:
            waker.listen()  # before the first fetch, so no wake-up falls between the two
        step = first or fetch
        while True:
            generation = waker.generation
            value = step()
            if ready(value) or deadline.passed:
                return value
            waker.wait(generation, deadline.nap(), work=work)
            step = fetch

    # -- producers ----------------------------------------------------------------------------

    def submit(
        self, queue: str, requests: Sequence[SubmitRequest], *, wait_s: float = 0.0
    ) -> list[str]:
        """Enqueue; on a queue that blocks when full, wait up to wait_s for room."""
        return self._submit(queue, requests, wait_s, sync_later=False)

    def _submit(
        self, queue: str, requests: Sequence[SubmitRequest], wait_s: float, *, sync_later: bool
    ) -> list[str]:
        deadline = Deadline(wait_s)
        waker = self.store.waker
        if wait_s > 0:
            waker.listen()  # before the first try: a claim's wake-up may follow its refusal
        while True:
            generation = waker.generation
            try:
                return self.store.submit(self._writing(), queue, requests, sync_later=sync_later)
            except QueueFullError as full:
                waker.wait(generation, room_wait(full, deadline))

    def submit_and_wait(
        self, queue: str, request: SubmitRequest, *, wait_s: float, block_s: float = 0.0
    ) -> Invocation:
        """Submit, wake the workers, then wait for the disk, then for the job. The submit owes
        its fsync (`sync_later`) and the wake-up goes out with its commit, so a worker in
        another process claims and runs the job while this thread waits for the flush instead
        of after it; nothing naming the id returns before the flush. A keyed submit, whose id
        another producer may be handed, commits durably."""
        owes = request.key is None
        waker = self.store.waker
        if wait_s > 0:
            waker.listen()  # before the submit: the job may end before its flush returns
        before = waker.generation
        (inv_id,) = self._submit(queue, [request], block_s, sync_later=owes)
        if owes:
            self.store.connector.sync(self.store.connector.mark())
        deadline = Deadline(wait_s)  # the wait for the result starts once the id is durable
        if wait_s > 0 and request.key is None and request.id is None:
            # The plane minted the id, so the job is new: until a wake-up that may concern its
            # readers comes after `before`, a read would find it unfinished. So wait for one
            # first: the read straight after the submit was 8% of an embedded call's CPU.
            waker.wait(before, deadline.nap(), work=reading(inv_id))
        return self.invocation(inv_id, wait_s=deadline.remaining())

    def invocation(self, inv_id: str, *, wait_s: float = 0.0) -> Invocation:
        def fetch() -> Invocation:
            self._swept()  # a job whose worker died ends or requeues within a sweep's period
            return self.store.invocation(self._reading(), inv_id)

        return self._wait_for(fetch, lambda inv: inv.terminal, wait_s, work=reading(inv_id))

    def count(self, queue: str, state: str = "queued") -> int:
        self._swept()
        return self.store.count(self._reading(), queue, state)

    def cancel(self, inv_id: str, *, kill: bool = False) -> bool:
        return self.store.cancel(self._reading(), inv_id, kill=kill)

    def frames(
        self, channel: str, *, since: int = -1, wait_s: float = 0.0, rank: int = 0
    ) -> list[Frame]:
        is_topic = channel.startswith("topic:")
        namespace = self._reading()
        if not is_topic:
            self.store.invocation(namespace, channel)  # 404 for a foreign id

        def fetch() -> tuple[list[Frame], bool]:
            frames = self.store.frames(channel, since, rank=rank)
            ended = not frames and not is_topic and self.invocation(channel).terminal
            return frames, ended

        def ready(got: tuple[list[Frame], bool]) -> bool:
            return bool(got[0]) or got[1]

        frames, _ = self._wait_for(fetch, ready, wait_s, work=reading(channel))
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
        return self.store.post(channel, kind, value, lease=lease, post_id=post_id)

    def topic_channel(self, queue: str, name: str) -> str:
        return topic_channel(self.namespace, queue, name)

    # -- workers ------------------------------------------------------------------------------

    def claim_many(self, args: ClaimArgs, *, wait_s: float = 0.0) -> list[Claim]:
        return self._claim_waiting(args, wait_s)

    def _claim_waiting(
        self,
        args: ClaimArgs,
        wait_s: float,
        first: Callable[[], list[Claim]] | None = None,
    ) -> list[Claim]:
        """Claim, waiting up to wait_s for work on the claim's queues (after `first`, when
        given)."""

        def fetch() -> list[Claim]:
            if args.worker in self._draining:  # woken by its own drain (`heartbeat`)
                return []
            return self.store.claim_many(self.namespace, args)

        work = [work_key(self.namespace, q) for q in args.queues or [DEFAULT_QUEUE]]
        done = self._draining.claim_done(args.worker)
        return self._wait_for(fetch, done, wait_s, work=work, first=first)

    def ack_and_claim(
        self, acks: Sequence[Ack], args: ClaimArgs, *, wait_s: float = 0.0
    ) -> tuple[list[DispatchError | None], list[Claim]]:
        errors: list[DispatchError | None] = []

        def first() -> list[Claim]:
            nonlocal errors
            errors, got = self.store.ack_and_claim(self.namespace, acks, args)
            return got

        got = self._claim_waiting(args, wait_s, first=first)
        return errors, got

    def ack(self, inv_id: str, lease: str, result: bytes | None) -> None:
        self.store.ack(inv_id, lease, result)

    def ack_many(self, acks: Sequence[Ack]) -> list[DispatchError | None]:
        return self.store.ack_many(acks)

    def nack(self, inv_id: str, lease: str, *, error: str, retry: bool = True) -> str:
        return self.store.nack(inv_id, lease, error=error, retry=retry)

    def end(
        self, inv_id: str, lease: str, *, state: str, error: str, cause: str | None = None
    ) -> None:
        self.store.end(inv_id, lease, state=state, error=error, cause=cause)

    def release(
        self, inv_id: str, lease: str, *, outcome: str = "unrun", cause: str = "notice"
    ) -> bool:
        return self.store.release(inv_id, lease, outcome=outcome, cause=cause)

    def note_cause(self, inv_id: str, lease: str, cause: str) -> bool:
        return self.store.note_cause(inv_id, lease, cause, ns=self.namespace)

    def checkpoint(self, inv_id: str, lease: str, checkpoint: bytes) -> bytes | None:
        return self.store.checkpoint(inv_id, lease, checkpoint, ns=self.namespace)

    def place(self, inv_id: str, lease: str, placement: dict[str, Any]) -> None:
        self.store.place(inv_id, lease, placement)

    def renew(self, leases: Sequence[str], lease_s: float) -> dict[str, bool]:
        return self.store.renew(leases, lease_s)

    # -- job runtimes -------------------------------------------------------------------------

    def runtime_missing(self, shas: Sequence[str]) -> list[str]:
        return self.store.runtime_missing(self.namespace, shas)

    def put_runtime_blobs(self, blobs: Sequence[tuple[str, bytes]]) -> int:
        return self.store.put_runtime_blobs(self._writing(), blobs)

    def put_runtime_manifest(self, manifest: dict[str, Any]) -> str:
        return self.store.put_runtime_manifest(self._writing(), manifest)

    def runtime_manifest(self, digest: str) -> dict[str, Any]:
        return self.store.runtime_manifest(self.namespace, digest)

    def runtime_blob(self, sha: str) -> bytes:
        return self.store.runtime_blob(self.namespace, sha)

    def gang(
        self, inv_id: str, lease: str, *, wait_s: float = 0.0, since: int | None = None
    ) -> GangState:
        def fetch() -> GangState:
            self._swept()  # a part whose worker died ends its gang within a sweep's period
            return self.store.gang(self._reading(), inv_id, lease)

        if wait_s > 0:
            self.store.waker.listen()  # before the first read, so no wake-up falls between
        first = fetch()
        seen = first.version if since is None else since
        if wait_s <= 0 or first.version > seen:
            return first
        return self._wait_for(fetch, lambda g: g.version > seen, wait_s, work=reading(inv_id))

    def gang_ready(
        self, inv_id: str, lease: str, *, addr: str | None = None, port: int | None = None
    ) -> GangState:
        return self.store.gang_ready(self._reading(), inv_id, lease, addr=addr, port=port)

    def gang_progress(self, inv_id: str, lease: str, *, hung: bool = False) -> GangState:
        return self.store.gang_progress(self._reading(), inv_id, lease, hung=hung)

    def gang_notice(self, inv_id: str, lease: str, *, until: float) -> GangState:
        return self.store.gang_notice(self._reading(), inv_id, lease, until=until)

    # -- queues -------------------------------------------------------------------------------

    def create_queue(self, name: str, **fields: Any) -> QueueInfo:
        return self.store.create_queue(self._writing(), name, **fields)

    def queue(self, name: str) -> QueueInfo:
        return self.store.queue(self._reading(), name)

    def queues(self, *, state: str | None = None) -> list[QueueInfo]:
        return self.store.queues(self.store.org_namespaces(self._reading()), state)

    def patch_queue(self, name: str, changes: dict[str, Any]) -> QueueInfo:
        return self.store.patch_queue(self._reading(), name, changes)

    def set_queue_state(self, name: str, action: str) -> QueueInfo:
        return self.store.set_queue_state(self._reading(), name, action)

    def delete_queue(self, name: str, *, force: bool = False) -> None:
        self.store.delete_queue(self._reading(), name, force=force)

    def events(self, name: str, *, limit: int = 50) -> list[dict[str, Any]]:
        return self.store.events(self._reading(), name, limit=limit)

    def stats(self, name: str) -> dict[str, Any]:
        self._swept()
        return self.store.stats(self._reading(), name)

    # -- worker rows --------------------------------------------------------------------------

    def register_worker(self, name: str, **fields: Any) -> WorkerInfo:
        worker = self.store.register_worker(self._writing(), name, **fields)
        self._draining.registered(name)
        return worker

    def heartbeat(
        self, worker_id: str, load: dict[str, Any], *, state: str = "alive"
    ) -> WorkerInfo:
        worker = self.store.heartbeat(worker_id, load, state=state)
        if self._draining.said(worker.name, state):
            self.store.waker.notify(local_only=True)  # its claim waiting here ends now
        return worker

    def worker(self, ref: str) -> WorkerInfo:
        return self.store.worker(self._reading(), ref)

    def workers(self) -> list[WorkerInfo]:
        return self.store.workers(self._reading())

    def update_worker_queues(
        self, ref: str, *, add: Sequence[str] = (), remove: Sequence[str] = ()
    ) -> WorkerInfo:
        return self.store.update_worker_queues(self._reading(), ref, add=add, remove=remove)

    def set_worker_state(self, ref: str, state: str) -> WorkerInfo:
        return self.store.set_worker_state(self._reading(), ref, state)

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
        self._swept()
        return self.store.invocations(
            self._reading(),
            queue=queue,
            state=state,
            limit=limit,
            before=before,
            map_id=map_id,
        )

    def retry(self, inv_id: str) -> Invocation:
        """Requeue a failed / killed / timeout invocation as a new attempt of the same id."""
        return self.store.retry(self._reading(), inv_id)

    def replace_elasticity(self, name: str, elasticity: dict[str, Any]) -> QueueInfo:
        """Set a queue's whole elasticity object, its kind included (`lakeshore compose`)."""
        return self.store.replace_elasticity(self._reading(), name, elasticity)

    def trim_retention(
        self,
        *,
        frames_older_than_s: float | None = None,
        invocations_older_than_s: float | None = None,
    ) -> Trimmed:
        """Trim this namespace's ended invocations: frames, then rows (see plane/retention.py).

        Returns what went and the spilled refs to delete (`dreamlake.lakeshore.retention.trim`
        does both).
        """
        return self.store.trim_retention(
            frames_older_than_s=frames_older_than_s,
            invocations_older_than_s=invocations_older_than_s,
            ns=self._reading(),
        )

    # -- named provider configs (sdk/plane/providers.py) --------------------------------------

    def add_provider(self, name: str, kind: str, config: dict[str, Any]) -> ProviderInfo:
        return self.store.add_provider(self._writing(), name, kind, config)

    def providers(self) -> list[ProviderInfo]:
        return self.store.providers(self._reading())

    def provider(self, name: str) -> ProviderInfo:
        return self.store.provider(self._reading(), name)

    def delete_provider(self, name: str) -> None:
        self.store.delete_provider(self._reading(), name)

    # -- cron schedules (sdk/plane/schedules.py) ----------------------------------------------

    def put_schedule(
        self,
        name: str,
        *,
        cron: str,
        queue: str,
        template: SubmitRequest,
        tz: str = "UTC",
        catchup: str = "latest",
        overlap: str = "allow",
    ) -> ScheduleInfo:
        # The store checks everything before it makes the namespace: bad input makes nothing.
        info = self.store.put_schedule(
            self.namespace,
            name,
            cron=cron,
            queue=queue,
            template=template,
            tz=tz,
            catchup=catchup,
            overlap=overlap,
        )
        self._ns_exists = True
        return info

    def schedules(self) -> list[ScheduleInfo]:
        self._swept()  # so the next fire times shown are not already past on an idle box
        return self.store.schedules(self._reading())

    def schedule(self, name: str) -> ScheduleInfo:
        self._swept()
        return self.store.schedule(self._reading(), name)

    def set_schedule_state(self, name: str, action: str) -> ScheduleInfo:
        return self.store.set_schedule_state(self._reading(), name, action)

    def delete_schedule(self, name: str) -> None:
        self.store.delete_schedule(self._reading(), name)

    def run_schedule(self, name: str, run_id: str | None = None) -> str:
        return self.store.run_schedule(self._reading(), name, run_id)


class Dispatch(LocalPlane):
    """The seeds' name for a plane, kept as it always worked: `LocalPlane`, except that
    `Dispatch()` opens what the process default (`SyncQueue("q")` with no `dispatch`) opens:
    when LAKESHORE_URL is set, an `HttpPlane` to that control plane (with LAKESHORE_TOKEN), in
    LAKESHORE_NAMESPACE unless `namespace` is given; and `Dispatch("http://host:8765")` is an
    `HttpPlane` to that server. So `isinstance(Dispatch(), Dispatch)` can be False; `LocalPlane`
    and `HttpPlane` say what a plane is.
    """

    def __new__(
        cls,
        target: str | os.PathLike[str] | SqlStore | None = None,
        *,
        namespace: str | None = None,
        durable: bool = True,
    ) -> Dispatch:
        url = env_url() if target is None else None
        if isinstance(target, str) and target.startswith(("http://", "https://")):
            url = target  # a server's address: the plane that talks to it, as Dispatch() would
        if url:
            # An HttpPlane, so Python skips __init__; typed as a Dispatch because both serve the
            # same Plane protocol, which is what a caller of Dispatch() relies on.
            from .http import HttpPlane  # only for a URL: not loaded by an embedded plane

            return HttpPlane(url, namespace=namespace or env_namespace())  # type: ignore[return-value]
        return super().__new__(cls)
