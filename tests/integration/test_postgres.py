"""The Postgres connector against a real server: what SQLite's single writer gave for free.

Migrations applied once however many processes start together; claims, idempotent keys, frame
sequence numbers and admission limits exact under concurrent transactions; LISTEN/NOTIFY waking a
waiter in another process; advisory-lock leader election. Each test runs in its own schema.
Skips without a server, fails under CI=true (tests/support/postgres.py).
"""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `tests.support` is importable however pytest was started
    sys.path.insert(0, str(ROOT))

import dreamlake.lakeshore as dls  # noqa: E402
from dreamlake.lakeshore.errors import QueueFullError  # noqa: E402
from dreamlake.lakeshore.plane import waiting as waiting_module  # noqa: E402
from dreamlake.lakeshore.plane.queries import POSTGRES, migrations  # noqa: E402
from dreamlake.lakeshore.types import Claim  # noqa: E402
from tests.support.postgres import (  # noqa: E402
    claim_all_worker,
    in_processes,
    migrate_worker,
    postgres_schema,
    submit_key_worker,
    submit_worker,
)

psycopg = pytest.importorskip("psycopg")
from dreamlake.lakeshore.plane import postgres_notify  # noqa: E402
from dreamlake.lakeshore.plane.postgres import (  # noqa: E402
    NotifyRelay,
    PostgresConnector,
    advisory_leader,
    parse_url,
)
from tests.support import claiming  # noqa: E402

pytestmark = pytest.mark.postgres

VERSIONS = [v for v, _ in migrations(POSTGRES)]


@pytest.fixture
def url() -> Iterator[str]:
    with postgres_schema() as scoped:
        yield scoped


@pytest.fixture
def plane(url: str) -> Iterator[dls.Dispatch]:
    with dls.Dispatch(url) as d:
        yield d


def sql(url: str, query: str, *params: object) -> list[tuple[object, ...]]:
    """Run one statement in the test's schema on a connection of its own."""
    conninfo, _ = parse_url(url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        cur = conn.execute(query, params or None)
        return cur.fetchall() if cur.description else []


def connector_of(plane: dls.Dispatch) -> PostgresConnector:
    connector = plane.store.connector
    assert isinstance(connector, PostgresConnector)
    return connector


# -- migrations ----------------------------------------------------------------------------------


def test_opening_twice_applies_each_migration_once(url: str) -> None:
    PostgresConnector(url).close()
    PostgresConnector(url).close()

    assert sql(url, "SELECT version FROM schema_version ORDER BY version") == [
        (v,) for v in VERSIONS
    ]


def test_processes_starting_together_on_a_fresh_schema_migrate_it_once(url: str) -> None:
    schemas = in_processes(migrate_worker, [(url,)] * 4)

    assert len(set(schemas)) == 1
    assert sql(url, "SELECT version FROM schema_version ORDER BY version") == [
        (v,) for v in VERSIONS
    ]


def test_queue_tables_get_their_storage_parameters(url: str) -> None:
    PostgresConnector(url).close()

    (options,) = sql(url, "SELECT reloptions FROM pg_class WHERE oid = 'invocations'::regclass")[0]

    assert isinstance(options, list)
    assert "fillfactor=80" in options
    assert "autovacuum_vacuum_scale_factor=0.01" in options


def test_the_rollups_duration_bin_is_an_expression_the_planner_inlines(url: str) -> None:
    # given: a migrated plane
    PostgresConnector(url).close()
    seconds = [0.0, -1.0, 0.000001, 0.0000099, 0.012345, 1.5, 86400.25]

    # when: the bins are computed, and a read over the table that calls it is planned
    got = [sql(url, "SELECT lakeshore_duration_bin(%s)", s)[0][0] for s in seconds]
    plan = sql(url, "EXPLAIN (VERBOSE) SELECT lakeshore_duration_bin(finished_at) FROM invocations")

    # then: the bins are the dashboard's (digits * 100 + the first two digits, in microseconds),
    # and the plan holds the expression instead of a call (a call is set up anew per ending)
    micros = [str(math.floor(max(0.0, s) * 1_000_000)) for s in seconds]
    assert got == [len(m) * 100 + int(m[:2]) for m in micros]
    assert "lakeshore_duration_bin" not in "\n".join(str(row[0]) for row in plan)


# -- exactness under concurrent transactions ------------------------------------------------------


def test_four_processes_claiming_200_jobs_get_each_exactly_once(
    url: str, plane: dls.Dispatch
) -> None:
    q = dls.SyncQueue("race", dispatch=plane)
    submitted = q.submit_many([{"i": i} for i in range(200)])

    claimed = in_processes(claim_all_worker, [(url, "race")] * 4)

    every = [inv_id for ids in claimed for inv_id in ids]
    assert sorted(every) == sorted(submitted)  # none lost, none twice
    assert q.count("succeeded") == 200


def test_concurrent_submits_of_one_key_from_processes_return_one_id(
    url: str, plane: dls.Dispatch
) -> None:
    answers = in_processes(submit_key_worker, [(url, "keyed", "same-key", 5)] * 4)

    ids = {inv_id for batch in answers for inv_id in batch}
    assert len(ids) == 1
    assert sql(url, "SELECT count(*) FROM invocations WHERE key = 'same-key'") == [(1,)]


def test_frames_posted_concurrently_get_distinct_contiguous_seqs(plane: dls.Dispatch) -> None:
    channel = plane.topic_channel("default", "metrics")

    def post_25(worker: int) -> list[int]:
        return [plane.post(channel, "VALUE", dls.encode((worker, i))) for i in range(25)]

    with ThreadPoolExecutor(8) as pool:
        seqs = [s for batch in pool.map(post_25, range(8)) for s in batch]

    assert sorted(seqs) == list(range(200))
    assert [f.seq for f in plane.frames(channel)] == list(range(200))


def test_max_depth_holds_under_concurrent_submitters(plane: dls.Dispatch) -> None:
    # Given a queue that holds 5 and 8 submitters released together (one pooled connection each)
    plane.create_queue("capped", admission={"max_depth": 5})
    q = dls.SyncQueue("capped", dispatch=plane)
    start = threading.Barrier(8)

    def submit_3(_: int) -> int:
        start.wait(DEADLINE_S)
        admitted = 0
        for i in range(3):
            try:
                q.submit({"i": i})
                admitted += 1
            except QueueFullError:
                pass
        return admitted

    with ThreadPoolExecutor(8) as pool:
        admitted = sum(pool.map(submit_3, range(8)))

    assert admitted == 5
    assert plane.count("capped") == 5


def test_a_sweep_that_skipped_a_locked_expired_attempt_never_ends_it_with_attempts_left(
    url: str, plane: dls.Dispatch
) -> None:
    # Given an attempt with attempts left whose lease has run out (the sweep is told a later
    # `now`), held FOR UPDATE by another transaction (a refused ack reads its lease so) while
    # one replica's sweep requeues
    q = dls.SyncQueue("expiring", dispatch=plane)
    inv = q.submit(1)
    job = q.claim(lease_s=30.0)
    assert job is not None and job.id == inv
    later = time.time() + 60.0
    conninfo, _ = parse_url(url)
    connector = connector_of(plane)
    with psycopg.connect(conninfo) as holder:
        holder.execute("SELECT 1 FROM invocations WHERE id = %s FOR UPDATE", (inv,))
        with connector.transaction() as tx:
            assert tx.all("requeue_expired", now=later) == []  # skipped: locked
        holder.commit()
        # When the same sweep goes on to end what ran out, the lock now gone
        with connector.transaction() as tx:
            ended = tx.all("end_expired", now=later)

    # Then it ends nothing: the attempt had retries left, and the next sweep requeues it
    assert ended == []
    assert plane.invocation(inv).state == "running"
    with connector.transaction() as tx:
        assert [r["id"] for r in tx.all("requeue_expired", now=later)] == [inv]


def test_pooled_connections_killed_by_the_server_are_replaced_not_raised(
    url: str, plane: dls.Dispatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given every pooled connection was terminated (a server restart, a failover)
    from dreamlake.lakeshore.plane import postgres

    monkeypatch.setattr(postgres, "CHECK_IDLE_S", 0.0)  # as if each had idled past the check
    q = dls.SyncQueue("survives", dispatch=plane)
    q.submit("before")
    killed = sql(
        url,
        "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE application_name = %s",
        f"lakeshore-pool {connector_of(plane).schema}",
    )
    assert killed and all(ok for (ok,) in killed)

    # Then the next calls get fresh connections instead of an error
    q.submit("after")
    assert q.count("queued") == 2


# -- wake-ups ------------------------------------------------------------------------------------


#: A blocked claim's window is longer than the test's deadline and the safety poll is off, so
#: only a wake-up makes it return in time (its last check at the window's end would come late).
WINDOW_S = 30.0
DEADLINE_S = 10.0


class BlockedClaim:
    """`plane.claim(..., wait_s=WINDOW_S)` running in a thread."""

    def __init__(self, plane: dls.Dispatch, queue: str) -> None:
        self._got: list[Claim | None] = []
        self._thread = threading.Thread(
            target=lambda: self._got.append(
                claiming.claim(plane, [queue], worker="waiter", wait_s=WINDOW_S)
            ),
            daemon=True,
        )
        self._thread.start()

    def result(self) -> Claim | None:
        self._thread.join(DEADLINE_S)
        if self._thread.is_alive():
            raise AssertionError(f"the claim is still blocked after {DEADLINE_S}s: no wake-up")
        return self._got[0]


@pytest.fixture
def no_safety_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(waiting_module, "SAFETY_POLL_S", 60.0)


@pytest.mark.usefixtures("no_safety_poll")
def test_a_submit_in_another_process_wakes_a_blocked_claim(url: str, plane: dls.Dispatch) -> None:
    # Given a claim blocked on an empty queue
    blocked = BlockedClaim(plane, "wake")
    assert connector_of(plane).relay.listening.wait(DEADLINE_S)

    # When another process submits
    (inv_id,) = in_processes(submit_worker, [(url, "wake", {"hello": 1})])

    # Then the claim returns that job
    claim = blocked.result()
    assert claim is not None
    assert claim.id == inv_id


@pytest.mark.usefixtures("no_safety_poll")
def test_a_script_that_submits_and_exits_without_closing_still_wakes_the_claim(
    url: str, plane: dls.Dispatch
) -> None:
    # Given a claim blocked on an empty queue
    blocked = BlockedClaim(plane, "fire-and-forget")
    assert connector_of(plane).relay.listening.wait(DEADLINE_S)

    # When a script submits and exits at once, never closing its plane
    script = (
        "import dreamlake.lakeshore as dls\n"
        f"plane = dls.Dispatch({url!r})\n"
        "print(dls.SyncQueue('fire-and-forget', dispatch=plane).submit('x'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=DEADLINE_S
    )
    assert done.returncode == 0, done.stderr

    # Then its last NOTIFY went out before the interpreter ended
    claim = blocked.result()
    assert claim is not None
    assert claim.id == done.stdout.strip()


@pytest.mark.usefixtures("no_safety_poll")
def test_the_listener_reconnects_after_its_connection_is_killed(
    url: str, plane: dls.Dispatch
) -> None:
    connector = connector_of(plane)
    waker = plane.store.waker
    connector.relay.listen(waker)
    assert connector.relay.listening.wait(DEADLINE_S)

    # Given the LISTEN connection is terminated by the server
    generation = waker.generation
    assert sql(
        url,
        "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE application_name = %s",
        f"lakeshore-listen {connector.schema}",
    ) == [(True,)]

    # Then the relay listens again (and bumps the waker so waiters re-check what they missed)
    assert waker.wait(generation, DEADLINE_S)
    assert connector.relay.listening.wait(DEADLINE_S)

    # And a writer on another connector (its own relay) wakes a claim blocked here
    blocked = BlockedClaim(plane, "again")
    with dls.Dispatch(url) as other:
        inv_id = dls.SyncQueue("again", dispatch=other).submit("x")
        claim = blocked.result()
    assert claim is not None
    assert claim.id == inv_id


# -- leader election ------------------------------------------------------------------------------


def test_second_contender_leads_only_after_the_first_closes(url: str) -> None:
    with ExitStack() as stack:  # both closed however the test ends
        first = stack.enter_context(advisory_leader(url, "controller"))
        second = stack.enter_context(advisory_leader(url, "controller"))
        assert first.is_leader
        assert not second.is_leader
        assert not second.try_acquire()

        first.close()  # unlocks before it disconnects: the hand-off is immediate, no polling

        assert second.try_acquire()
        assert second.is_leader


def test_leadership_passes_on_when_the_leaders_connection_dies(url: str) -> None:
    with (
        advisory_leader(url, "controller") as first,
        advisory_leader(url, "controller") as second,
    ):
        assert first.is_leader and not second.is_leader

        # waits (up to 5 s) until the backend has exited, so its lock is gone
        assert sql(url, "SELECT pg_terminate_backend(%s, 5000)", first.backend_pid) == [(True,)]

        assert second.try_acquire()
        assert not first.try_acquire()
        assert not first.is_leader


def test_leaders_of_different_schemas_do_not_contend(url: str) -> None:
    with (
        postgres_schema() as elsewhere,
        advisory_leader(url, "controller") as here,
        advisory_leader(elsewhere, "controller") as there,
    ):
        assert here.is_leader and there.is_leader


def test_a_non_durable_transaction_turns_synchronous_commit_off_for_itself_only(
    plane: dls.Dispatch,
) -> None:
    connector = connector_of(plane)
    with connector.transaction(durable=False) as tx:
        tx.one("get_queue", ns="default", name="q")  # the setting goes out with the first one
        inside = tx._conn.execute("SHOW synchronous_commit").fetchone()  # type: ignore[attr-defined]
    with connector.transaction() as tx:
        tx.one("get_queue", ns="default", name="q")
        after = tx._conn.execute("SHOW synchronous_commit").fetchone()  # type: ignore[attr-defined]

    assert inside["synchronous_commit"] == "off"
    assert after["synchronous_commit"] == "on"


def test_a_transaction_that_would_owe_its_flush_waits_for_it_on_postgres(
    plane: dls.Dispatch,
) -> None:
    """A submit-and-wait's `sync_later` commits durably on Postgres: nothing is ever owed."""
    connector = connector_of(plane)
    with connector.transaction(sync_later=True) as tx:
        tx.one("get_queue", ns="default", name="q")
        inside = tx._conn.execute("SHOW synchronous_commit").fetchone()  # type: ignore[attr-defined]
    assert inside["synchronous_commit"] == "on"
    mark = connector.mark()
    assert connector.synced(mark)
    connector.sync(mark)  # returns at once: nothing to flush


def _status(tx: object) -> object:
    return tx._conn.info.transaction_status  # type: ignore[attr-defined]


def _make_queue(tx: object, name: str) -> None:
    tx.one(  # type: ignore[attr-defined]
        "ensure_queue", ns="default", name=name, kind="fifo", description="", now=time.time()
    )


def _queues_named(url: str, name: str) -> int:
    return len(sql(url, "SELECT 1 FROM queues WHERE name = %s", name))


def test_a_write_transaction_begins_with_its_first_statement_and_commits_it(
    plane: dls.Dispatch, url: str
) -> None:
    """BEGIN goes out in one pipeline with the first statement: nothing is open before it,
    what follows runs in the same transaction, and the exit commits it all."""
    with connector_of(plane).transaction() as tx:
        before = _status(tx)
        _make_queue(tx, "one")
        between = _status(tx)
        _make_queue(tx, "two")
        unseen = _queues_named(url, "one") + _queues_named(url, "two")

    assert before == psycopg.pq.TransactionStatus.IDLE
    assert between == psycopg.pq.TransactionStatus.INTRANS
    assert unseen == 0
    assert _queues_named(url, "one") == _queues_named(url, "two") == 1


def test_a_write_transaction_that_fails_rolls_back_and_leaves_its_connection_clean(
    plane: dls.Dispatch, url: str
) -> None:
    connector = connector_of(plane)
    with pytest.raises(RuntimeError), connector.transaction() as tx:
        _make_queue(tx, "changed-its-mind")
        raise RuntimeError("the caller changed its mind")
    with pytest.raises(psycopg.errors.UndefinedFunction), connector.transaction() as tx:
        # A statement of the opening pipeline fails: the rest of it never runs.
        tx._opening = (*tx._opening, ("SELECT no_such_function()", None))  # type: ignore[attr-defined]
        _make_queue(tx, "failed-in-the-pipeline")

    assert (
        _queues_named(url, "changed-its-mind") == _queues_named(url, "failed-in-the-pipeline") == 0
    )
    for _ in range(3):  # every connection the pool hands out is clean
        with connector.transaction() as tx:
            assert _status(tx) == psycopg.pq.TransactionStatus.IDLE
            _make_queue(tx, "after")
    assert _queues_named(url, "after") == 1


def test_without_pipelines_a_write_transaction_sends_its_opening_one_by_one(
    plane: dls.Dispatch, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """libpq before 14 has no pipeline mode: the same transaction, a round trip more."""
    from dreamlake.lakeshore.plane import postgres

    monkeypatch.setattr(postgres, "_PIPELINES", False)
    monkeypatch.setattr(psycopg.Connection, "pipeline", None)  # any use of it would raise
    with connector_of(plane).transaction(durable=False) as tx:
        _make_queue(tx, "one")
        setting = tx._conn.execute("SHOW synchronous_commit").fetchone()  # type: ignore[attr-defined]
        assert _status(tx) == psycopg.pq.TransactionStatus.INTRANS
    assert setting["synchronous_commit"] == "off"
    assert _queues_named(url, "one") == 1


def test_a_write_transaction_that_ran_nothing_sends_nothing(plane: dls.Dispatch) -> None:
    with connector_of(plane).transaction() as tx:
        pass
    assert not tx.begun  # type: ignore[attr-defined]


def test_wake_payloads_round_trip_and_fall_back_to_anything() -> None:
    from dreamlake.lakeshore.plane.postgres import MAX_WAKE_PAYLOAD, decode_wake, encode_wake

    keys = frozenset({"ns/a", "ns/b", "*readers"})
    assert decode_wake(encode_wake("tok", keys)) == ("tok", keys)
    assert decode_wake(encode_wake("tok", frozenset())) == ("tok", frozenset())
    assert decode_wake(encode_wake("tok", None)) == ("tok", None)
    assert decode_wake("tok") == ("tok", None)  # an older sender: anything may have changed
    many = frozenset(f"ns/queue-{i}" for i in range(MAX_WAKE_PAYLOAD // 8))
    assert decode_wake(encode_wake("tok", many)) == ("tok", None)  # too long for one NOTIFY


def test_another_replicas_commit_wakes_only_the_waiters_it_concerns(url: str) -> None:
    """The NOTIFY names the queues a commit brought work to: a replica's idle claims on other
    queues sleep through it, as they would through a commit of their own replica."""
    with dls.Dispatch(url) as here, dls.Dispatch(url) as there:
        waker = here.store.waker
        waker.listen()
        assert connector_of(here).relay.listening.wait(DEADLINE_S)
        gen = waker.generation

        dls.SyncQueue("busy", dispatch=there).submit(1)

        deadline = time.monotonic() + DEADLINE_S
        while waker.generation == gen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert waker.generation != gen, "no NOTIFY arrived"
        ns = here.namespace
        assert waker.work_since(gen, [f"{ns}/busy"])
        assert not waker.work_since(gen, [f"{ns}/idle"])
        assert not waker.work_since(gen, ["*readers"])  # a submit ends nothing


# -- a NOTIFY only where another process listens ------------------------------------------------


def listening_relay(plane: dls.Dispatch) -> NotifyRelay:
    """The plane's NOTIFY relay, once its own listener is up (so the count of others ran)."""
    relay = connector_of(plane).relay
    plane.store.waker.listen()
    assert relay.listening.wait(DEADLINE_S)
    return relay


def test_a_plane_alone_sends_no_notify(url: str) -> None:
    # Given a plane listening on its schema, with no other process listening there
    with dls.Dispatch(url) as alone:
        relay = listening_relay(alone)

        # When it commits something another process would be told of
        dls.SyncQueue("q", dispatch=alone).submit(1)
        assert relay.flush()

        # Then no NOTIFY went out: nobody would have read it but its own listener
        assert relay.notified == 0
        assert relay.skipped >= 1


def test_a_plane_alone_skips_in_the_writer_without_waking_its_sender(url: str) -> None:
    # Given a plane whose sender has counted nobody else listening
    with dls.Dispatch(url) as alone:
        relay = listening_relay(alone)
        dls.SyncQueue("q", dispatch=alone).submit(1)
        assert relay.flush() and relay.notified == 0
        skipped = relay.skipped

        # When the next commit asks for a NOTIFY
        relay.send(frozenset({"default/q"}))

        # Then the writer itself counted it skipped: the sender thread was not woken for it
        assert relay.skipped == skipped + 1
        assert relay.flush(timeout=0) and relay.notified == 0


def test_a_listener_that_starts_is_told_of_the_next_commit_without_a_recount(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a plane that counted nobody else listening, and will not count again for an hour
    monkeypatch.setattr(postgres_notify, "LISTENERS_CHECK_S", 3600.0)
    with dls.Dispatch(url) as here:
        relay = listening_relay(here)
        dls.SyncQueue("q", dispatch=here).submit(1)
        assert relay.flush() and relay.notified == 0

        # When another process starts listening (its announcement reaches this one's listener)
        with dls.Dispatch(url) as there:
            waker = there.store.waker
            waker.listen()
            assert connector_of(there).relay.listening.wait(DEADLINE_S)

            # Then the next commits here reach it, though no recount ran
            gen = waker.generation
            deadline = time.monotonic() + DEADLINE_S
            while not waker.work_since(gen, [f"{here.namespace}/q"]):
                assert time.monotonic() < deadline, "the new listener was never told"
                dls.SyncQueue("q", dispatch=here).submit(2)
                waker.wait(gen, 0.2, work=[f"{here.namespace}/q"])
            assert relay.flush()  # the sender counts a NOTIFY after Postgres took it
            assert relay.notified >= 1
