"""Issue 8: `dls.context` run scopes, run queues, inheritance through jobs, and prune."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import dreamlake.lakeshore as dls
from dreamlake.lakeshore import codec, queue_handle
from dreamlake.lakeshore.cli.prune import prune as prune_command
from dreamlake.lakeshore.context import current_run, run, run_queue_name
from dreamlake.lakeshore.envelope import Envelope
from dreamlake.lakeshore.errors import InvalidArgument, NotFound
from dreamlake.lakeshore.execute import run_body
from dreamlake.lakeshore.home import home
from dreamlake.lakeshore.plane import reset_default_plane
from dreamlake.lakeshore.prune import parse_duration, prune_run_queues
from dreamlake.lakeshore.types import NAME_PATTERN

DAY = 86400.0


@pytest.fixture
def d() -> Iterator[dls.Dispatch]:
    with dls.Dispatch(":memory:") as plane:
        yield plane


# -- the context primitive --------------------------------------------------------------------


def test_runs_nest_and_restore() -> None:
    assert current_run() is None
    with run("outer"):
        with run("inner"):
            assert current_run() == "inner"
            with run(None):
                assert current_run() is None
        assert current_run() == "outer"
    assert current_run() is None
    assert dls.context.current_run is current_run


def test_a_run_id_must_be_a_non_empty_string() -> None:
    for bad in ("", "   ", 42):
        with pytest.raises(InvalidArgument, match="run id"), run(bad):  # type: ignore[arg-type]
            pass


def test_each_thread_has_its_own_run() -> None:
    barrier = threading.Barrier(3)
    seen: dict[str, Any] = {}

    def inside(run_id: str) -> None:
        seen[f"{run_id}:start"] = current_run()
        with run(run_id):
            barrier.wait(timeout=5)  # both threads are inside their runs at once
            seen[run_id] = current_run()
            barrier.wait(timeout=5)

    with run("main"):
        threads = [threading.Thread(target=inside, args=(r,)) for r in ("t1", "t2")]
        for t in threads:
            t.start()
        barrier.wait(timeout=5)
        barrier.wait(timeout=5)
        for t in threads:
            t.join(timeout=5)
        assert current_run() == "main"

    assert seen == {"t1:start": None, "t2:start": None, "t1": "t1", "t2": "t2"}


def test_each_asyncio_task_has_its_own_run() -> None:
    async def task(run_id: str, ready: asyncio.Event, go: asyncio.Event) -> tuple[Any, Any]:
        inherited = current_run()
        with run(run_id):
            ready.set()
            await go.wait()  # the other task runs its `with run(...)` meanwhile
            return inherited, current_run()

    async def main() -> tuple[list[tuple[Any, Any]], Any]:
        with run("parent"):
            events = [(asyncio.Event(), asyncio.Event()) for _ in range(2)]
            tasks = [
                asyncio.create_task(task(f"task-{i}", r, g)) for i, (r, g) in enumerate(events)
            ]
            for ready, _ in events:
                await ready.wait()
            for _, go in events:
                go.set()
            results = await asyncio.gather(*tasks)
            return results, current_run()

    results, after = asyncio.run(main())

    assert results == [("parent", "task-0"), ("parent", "task-1")]
    assert after == "parent"


# -- run queue names --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("run_id", "expected"),
    [
        ("sweep-42", "rollouts-run-sweep-42"),
        ("Sweep_42", "rollouts-run-sweep-42"),
        ("a--b__c..D", "rollouts-run-a-b-c-d"),
        ("  /exp/7/  ", "rollouts-run-exp-7"),
    ],
)
def test_a_run_queue_name_is_the_queue_plus_a_slug(run_id: str, expected: str) -> None:
    assert run_queue_name("rollouts", run_id) == expected


def test_a_long_or_empty_slug_is_cut_and_hashed() -> None:
    long_a, long_b = "x" * 300 + "a", "x" * 300 + "b"

    a, b = run_queue_name("rollouts", long_a), run_queue_name("rollouts", long_b)
    empty = run_queue_name("rollouts", "___")

    assert len(a) == 128 and a != b and a.startswith("rollouts-run-xxx")
    assert re.fullmatch(r"rollouts-run-x+-[0-9a-f]{8}", a)
    assert re.fullmatch(r"rollouts-run-[0-9a-f]{8}", empty)
    for name in (a, b, empty, run_queue_name("q", "Ünïcode ☃ run")):
        assert NAME_PATTERN.match(name) and len(name) <= 128


def test_a_queue_name_too_long_for_a_run_scope_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="too long to scope by run"):
        run_queue_name("q" * 120, "r" * 20)


# -- scope="run" ------------------------------------------------------------------------------


def double(n: int) -> int:
    return n * 2


def test_scope_run_submits_to_the_run_queue_only_inside_a_run(d: dls.Dispatch) -> None:
    f = dls.udf(double, queue=dls.BoltzmannQueue("rollouts", temperature=0.5), scope="run")

    outside = f.submit(1, _dispatch=d)
    with run("Sweep 42"):
        inside = f.submit(2, _dispatch=d)

    assert d.invocation(outside).queue == "rollouts"
    assert d.invocation(inside).queue == "rollouts-run-sweep-42"
    row = d.queue("rollouts-run-sweep-42")
    assert row.kind == "boltzmann"
    assert row.description.startswith("Run-scoped queue of 'rollouts' for run 'Sweep 42'")


def test_a_run_queue_keeps_its_queue_class_and_settings() -> None:
    q = dls.SyncPriorityQueue("urgent", priority_field="p")

    scoped = q.for_run("r1")

    assert isinstance(scoped, dls.SyncPriorityQueue) and scoped.priority_field == "p"
    assert scoped.name == "urgent-run-r1" and q.for_run("r1") is scoped
    assert q.for_run() is q  # no current run: the queue itself
    assert dls.Queue("urgent").for_run("r1").name == "urgent-run-r1"


def test_a_run_queue_handle_touches_its_row_while_in_use(
    d: dls.Dispatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queue_handle, "RUN_QUEUE_TOUCH_S", 0.0)  # touch on every submit
    q = dls.SyncQueue("rollouts", dispatch=d).for_run("r1")

    q.submit(1)
    q.submit(2)

    kinds = [e["kind"] for e in d.events("rollouts-run-r1")]
    assert kinds == ["patched", "created"]  # newest first: created, then one touch


def test_a_job_carries_its_producers_run_to_the_worker(d: dls.Dispatch) -> None:
    q = dls.SyncQueue("jobs", dispatch=d)
    with run("sweep-7"):
        inv = q.submit(dls.thunk(current_run))
    plain = q.submit(dls.thunk(current_run))

    dls.run_worker(q, burst=True)

    assert q.result(inv, timeout=5) == "sweep-7"
    assert q.result(plain, timeout=5) is None
    assert current_run() is None  # nothing leaked into this thread


def test_a_run_queues_jobs_carry_its_run_without_a_run_context(d: dls.Dispatch) -> None:
    q = dls.Queue("jobs", dispatch=d).for_run("r9")

    inv = asyncio.run(q.submit(dls.thunk(current_run)))
    dls.run_worker(q, once=True)

    assert q.name == "jobs-run-r9"
    assert q.sync.result(inv, timeout=5) == "r9"


def test_the_run_rides_the_envelope_on_the_wire() -> None:
    env = Envelope.for_exec("true")

    out = codec.decode(codec.encode(Envelope(kind="raw", value=1, run="sweep-7")))

    assert isinstance(out, Envelope) and out.run == "sweep-7"
    assert env.run is None


def test_run_body_restores_the_run_for_the_body_only() -> None:
    env = Envelope.for_thunk(dls.thunk(current_run))
    env = Envelope(kind=env.kind, fn=env.fn, run="from-parent")

    with run("worker-own"):
        assert run_body(env, lambda _: None) == "from-parent"
        assert current_run() == "worker-own"


# A parent job that submits a child: module-level functions so that they pickle by reference.
_PLANES: list[dls.Dispatch] = []


def child_body(n: int) -> int:
    return n * 10


child = dls.udf(child_body, queue="tasks", scope="run")


def parent_body(n: int) -> str:
    return child.submit(n, _dispatch=_PLANES[0])


parent = dls.udf(parent_body, queue="orchestrate")


def test_a_child_inherits_the_run_of_its_parent_job(d: dls.Dispatch) -> None:
    _PLANES[:] = [d]
    with run("Sweep-42"):
        parent_inv = parent.submit(3, _dispatch=d)

    assert dls.run_worker(d, ["orchestrate"], once=True) == 1
    child_inv = dls.SyncQueue("orchestrate", dispatch=d).result(parent_inv, timeout=5)

    assert d.invocation(child_inv).queue == "tasks-run-sweep-42"
    child_queue = dls.SyncQueue("tasks-run-sweep-42", dispatch=d)
    dls.run_worker(child_queue, once=True)
    assert child_queue.result(child_inv, timeout=5) == 30
    assert current_run() is None


# -- prune --------------------------------------------------------------------------------------


def make_run_queue(d: dls.Dispatch, queue: str, run_id: str, *, drain: bool = True) -> str:
    q = dls.SyncQueue(queue, dispatch=d).for_run(run_id)
    q.submit(dls.thunk(current_run))
    if drain:
        dls.run_worker(q, burst=True)
    return q.name


def names(d: dls.Dispatch) -> set[str]:
    return {q.name for q in d.queues()}


def test_prune_removes_run_queues_that_are_empty_and_idle(d: dls.Dispatch) -> None:
    done = make_run_queue(d, "rollouts", "old")
    busy = make_run_queue(d, "rollouts", "busy", drain=False)
    lookalike = dls.SyncQueue("dry-run-tests", dispatch=d)
    lookalike.submit(1)
    lookalike.claim()

    result = prune_run_queues(d, older_than_s=7 * DAY, now=time.time() + 8 * DAY)

    assert result.pruned == [done]
    assert result.kept == {busy: "1 queued"}
    assert names(d) >= {busy, "dry-run-tests"} and done not in names(d)


def test_prune_keeps_run_queues_active_within_the_cutoff(d: dls.Dispatch) -> None:
    recent = make_run_queue(d, "rollouts", "recent")

    result = prune_run_queues(d, older_than_s=DAY)

    assert result.pruned == []
    assert result.kept[recent].startswith("active ")
    assert recent in names(d)


def test_prune_dry_run_deletes_nothing(d: dls.Dispatch) -> None:
    done = make_run_queue(d, "rollouts", "old")

    result = prune_run_queues(d, older_than_s=0, now=time.time() + 1, dry_run=True)

    assert result.pruned == [done] and done in names(d)


def test_a_pruned_queues_invocations_stay_readable(d: dls.Dispatch) -> None:
    q = dls.SyncQueue("rollouts", dispatch=d).for_run("old")
    inv = q.submit(dls.thunk(current_run))
    dls.run_worker(q, burst=True)

    prune_run_queues(d, older_than_s=0, now=time.time() + 1)

    assert q.name not in names(d)
    assert q.result(inv, timeout=5) == "old"


def test_prune_keeps_a_run_queue_with_member_workers(d: dls.Dispatch) -> None:
    done = make_run_queue(d, "rollouts", "served")
    d.register_worker("w1", queues=[done])

    result = prune_run_queues(d, older_than_s=0, now=time.time() + 1)

    assert result.pruned == [] and "member" in result.kept[done]


class Probing:
    """A plane that can say when a queue last saw an invocation."""

    def __init__(self, plane: dls.Dispatch, at: float) -> None:
        self.plane, self.at = plane, at

    def __getattr__(self, name: str) -> Any:
        return getattr(self.plane, name)

    def last_activity(self, queue: str) -> float:
        return self.at


def test_prune_asks_a_plane_that_knows_the_last_invocation(d: dls.Dispatch) -> None:
    done = make_run_queue(d, "rollouts", "old")
    now = time.time() + 8 * DAY

    result = prune_run_queues(Probing(d, now - DAY), older_than_s=7 * DAY, now=now)  # type: ignore[arg-type]

    assert result.pruned == [] and done in result.kept


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90.0), ("90s", 90.0), ("30m", 1800.0), ("12h", 43200.0), ("7d", 7 * DAY)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "7 days", "-1d", "d7", "1y"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(InvalidArgument, match="invalid duration"):
        parse_duration(text)


@pytest.fixture
def lakeshore_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("LAKESHORE_HOME", str(tmp_path / "home"))
    for name in ("LAKESHORE_URL", "LAKESHORE_NAMESPACE", "LAKESHORE_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    reset_default_plane()
    yield tmp_path / "home"
    reset_default_plane()


def test_the_cli_prunes_the_embedded_plane(lakeshore_home: Path) -> None:
    with dls.Dispatch(home() / "lakeshore.db") as plane:
        done = make_run_queue(plane, "rollouts", "old")
    runner = CliRunner()

    kept = runner.invoke(prune_command, ["--older-than", "7d"])
    dry = runner.invoke(prune_command, ["--older-than", "0s", "--dry-run", "--json"])
    gone = runner.invoke(prune_command, ["--older-than", "0s"])

    assert kept.exit_code == 0 and f"kept {done}: active" in kept.output
    assert json.loads(dry.output)["pruned"] == [done]
    assert gone.exit_code == 0 and f"pruned {done}" in gone.output
    with dls.Dispatch(home() / "lakeshore.db") as plane, pytest.raises(NotFound):
        plane.queue(done)


def test_the_cli_refuses_a_bad_duration(lakeshore_home: Path) -> None:
    result = CliRunner().invoke(prune_command, ["--older-than", "soon"])

    assert result.exit_code == 2 and "invalid duration 'soon'" in result.output
