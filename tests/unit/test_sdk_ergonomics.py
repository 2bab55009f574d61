"""Issue 8: typed queues, `Pool`, `named`, string queues in `@udf`, the `q` module, anneal."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Iterator
from typing import Any

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.anneal import Anneal, AnnealState
from dreamlake.lakeshore.errors import InvalidArgument, NotFound
from dreamlake.lakeshore.queue import (
    BoltzmannQueue,
    FILOQueue,
    PriorityQueue,
    Queue,
    SyncBoltzmannQueue,
    SyncFILOQueue,
    SyncPriorityQueue,
    SyncQueue,
    UnknownQueueWarning,
)
from dreamlake.lakeshore.types import ClaimArgs


@pytest.fixture
def d() -> Iterator[dls.Dispatch]:
    with dls.Dispatch(":memory:") as plane:
        yield plane


@pytest.fixture(autouse=True)
def lenient(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAKESHORE_STRICT_QUEUES", raising=False)


class Recording:
    """A plane that notes the temperature of every claim and forwards everything."""

    def __init__(self, plane: dls.Dispatch) -> None:
        self.plane = plane
        self.temperatures: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.plane, name)

    def claim_many(self, args: ClaimArgs, **kw: Any) -> Any:
        self.temperatures.append(args.temperature)
        return self.plane.claim_many(args, **kw)


def echo(payload: Any) -> Any:
    return payload


def queue_exists(d: dls.Dispatch, name: str) -> bool:
    try:
        d.queue(name)
    except NotFound:
        return False
    return True


# -- typed subclasses -------------------------------------------------------------------------


def test_every_typed_queue_is_a_queue_and_fixes_its_kind(d: dls.Dispatch) -> None:
    asyncs = [PriorityQueue("a", dispatch=d), BoltzmannQueue("b", dispatch=d)]
    asyncs.append(FILOQueue("c", dispatch=d))
    syncs = [SyncPriorityQueue("a"), SyncBoltzmannQueue("b"), SyncFILOQueue("c")]

    assert all(isinstance(q, Queue) for q in asyncs)
    assert all(isinstance(q, SyncQueue) for q in syncs)
    assert isinstance(asyncs[1], PriorityQueue) and isinstance(syncs[1], SyncPriorityQueue)
    assert [q.sync.kind for q in asyncs] == ["fifo", "boltzmann", "filo"]
    assert [type(q.sync) for q in asyncs] == [type(q) for q in syncs]


def test_the_classes_are_exported_from_the_package_and_the_queue_module() -> None:
    queue_module = importlib.import_module("dreamlake.lakeshore.queue")
    names = ["PriorityQueue", "BoltzmannQueue", "FILOQueue", "Pool", "UnknownQueueWarning"]
    names += ["SyncPriorityQueue", "SyncBoltzmannQueue", "SyncFILOQueue"]

    for name in names:
        assert getattr(dls, name) is getattr(queue_module, name)
        assert name in dls.__all__


@pytest.mark.parametrize(
    ("make", "arg", "takes"),
    [
        (lambda: SyncQueue("q", temperature=0.5), "temperature", "boltzmann"),
        (lambda: Queue("q", kind="filo", temperature=0.5), "temperature", "boltzmann"),
        (lambda: FILOQueue("q", temperature=0.5), "temperature", "boltzmann"),  # type: ignore[arg-type]
        (lambda: SyncFILOQueue("q", temperature=0.5), "temperature", "boltzmann"),  # type: ignore[arg-type]
        (lambda: PriorityQueue("q", anneal={}), "anneal", "boltzmann"),  # type: ignore[arg-type]
        (lambda: FILOQueue("q", priority_field="p"), "priority_field", "priority and boltzmann"),  # type: ignore[arg-type]
        (lambda: SyncQueue("q", priority_field="p"), "priority_field", "priority and boltzmann"),  # type: ignore[arg-type]
    ],
)
def test_an_argument_of_another_kind_is_an_error_naming_who_takes_it(
    make: Any, arg: str, takes: str
) -> None:
    with pytest.raises(InvalidArgument) as err:
        make()

    assert f"{arg}= is an argument of {takes} queues" in str(err.value)


def test_the_error_names_the_queue_and_its_kind() -> None:
    with pytest.raises(InvalidArgument, match=r"FILOQueue 'stack' is a filo queue"):
        FILOQueue("stack", temperature=0.5)  # type: ignore[arg-type]


def test_a_misspelt_argument_gets_a_suggestion() -> None:
    with pytest.raises(
        InvalidArgument, match=r"unknown argument temprature=; did you mean temperature=\?"
    ):
        BoltzmannQueue("rollouts", temprature=0.5)  # type: ignore[arg-type]


def test_the_generic_constructor_still_takes_kind_and_temperature() -> None:
    boltz = SyncQueue("q", kind="boltzmann", temperature=0.25)
    filo = SyncQueue("q", kind="filo", temperature=1.0)  # the default changes nothing: accepted

    assert (boltz.kind, boltz.temperature) == ("boltzmann", 0.25)
    assert filo.kind == "filo"


def test_a_leading_slash_is_an_absolute_name() -> None:
    assert Queue("/shared").name == "shared"
    assert SyncPriorityQueue("/urgent").name == "urgent"
    with pytest.raises(InvalidArgument, match="invalid queue name"):
        SyncQueue("//shared")


# -- priority_field -----------------------------------------------------------------------------


def test_a_priority_queue_reads_the_priority_from_the_payload(d: dls.Dispatch) -> None:
    q = SyncPriorityQueue("urgent", dispatch=d, priority_field="p")

    high = q.submit({"p": 5, "req": "a"})
    low = q.submit({"p": 1, "req": "b"})
    none = q.submit({"req": "c"})
    given = q.submit({"p": 9}, priority=2.0)  # an explicit priority wins

    assert [q.status(i).priority for i in (high, low, none, given)] == [5.0, 1.0, 0.0, 2.0]
    job = q.claim()
    assert job is not None and job.id == high


def test_submit_many_reads_each_payloads_priority(d: dls.Dispatch) -> None:
    q = SyncPriorityQueue("urgent", dispatch=d)

    ids = q.submit_many([{"priority": 3}, {"priority": 7}])

    assert [q.status(i).priority for i in ids] == [3.0, 7.0]


def test_a_priority_field_that_is_not_a_number_is_refused(d: dls.Dispatch) -> None:
    q = SyncPriorityQueue("urgent", dispatch=d)

    with pytest.raises(InvalidArgument, match="priority field 'priority' must be a number"):
        q.submit({"priority": "high"})
    assert q.count() == 0


def test_a_plain_queue_ignores_payload_fields(d: dls.Dispatch) -> None:
    q = SyncQueue("plain", dispatch=d)

    inv = q.submit({"priority": 8})

    assert q.status(inv).priority == 0.0


def serve(req: dict[str, Any]) -> Any:
    return req


def score(x: int, p: float = 0.0) -> float:
    return x + p


def test_a_udf_call_gives_its_priority_by_argument_or_first_dict(d: dls.Dispatch) -> None:
    by_dict = dls.udf(serve, queue="urgent", priority_field="p")
    by_arg = dls.udf(score, queue="urgent", priority_field="p")

    a = by_dict.submit({"p": 7}, _dispatch=d)
    b = by_arg.submit(1, 3.0, _dispatch=d)
    c = by_arg.submit(1, p=4.0, _dispatch=d, _priority=0.5)

    assert [d.invocation(i).priority for i in (a, b, c)] == [7.0, 3.0, 0.5]


def test_the_async_priority_queue_does_the_same(d: dls.Dispatch) -> None:
    q = PriorityQueue("urgent", dispatch=d)

    inv = asyncio.run(q.submit({"priority": 6}))

    assert q.sync.status(inv).priority == 6.0


# -- the queue row: typed queues, elasticity, Pool, named -------------------------------------


def test_a_typed_queue_touches_nothing_until_first_use_then_creates_its_row(
    d: dls.Dispatch,
) -> None:
    q = SyncBoltzmannQueue("rollouts", dispatch=d, temperature=0.5)
    assert not queue_exists(d, "rollouts")

    q.submit({"x": 1})

    assert d.queue("rollouts").kind == "boltzmann"


def test_a_filo_queue_creates_its_row_on_first_claim(d: dls.Dispatch) -> None:
    q = SyncFILOQueue("stack", dispatch=d)

    assert q.claim() is None
    assert d.queue("stack").kind == "filo"


def test_a_plain_queue_leaves_the_row_to_the_plane(d: dls.Dispatch) -> None:
    q = SyncQueue("plain", dispatch=d, kind="filo")

    q.submit(1)

    assert d.queue("plain").kind == "fifo"  # created by the submit, as before


def test_elasticity_is_written_to_the_row_at_first_use_and_patched_when_it_differs(
    d: dls.Dispatch,
) -> None:
    first = Queue("fleet", dispatch=d, elasticity={"kind": "fixed", "max": 2})
    assert not queue_exists(d, "fleet")
    asyncio.run(first.submit(1))
    assert d.queue("fleet").elasticity == {"kind": "fixed", "max": 2}

    SyncQueue("fleet", dispatch=d, elasticity={"kind": "fixed", "max": 5}).submit(2)

    assert d.queue("fleet").elasticity == {"kind": "fixed", "max": 5}


def test_an_invalid_elasticity_fails_at_construction(d: dls.Dispatch) -> None:
    with pytest.raises(InvalidArgument, match="unknown elasticity kind"):
        Queue("fleet", dispatch=d, elasticity={"kind": "lots"})


def test_pool_is_a_deprecated_shim_over_fixed_elasticity(d: dls.Dispatch) -> None:
    with pytest.warns(DeprecationWarning, match="Pool is deprecated"):
        pool = dls.Pool("pool", 4, dispatch=d)

    assert isinstance(pool, Queue) and pool.size == 4
    assert not queue_exists(d, "pool")  # lazy, like every queue
    asyncio.run(pool.submit({"x": 1}))
    assert d.queue("pool").elasticity == {"kind": "fixed", "max": 4}


def test_pool_refuses_a_bad_size_and_its_own_elasticity(d: dls.Dispatch) -> None:
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidArgument, match="size"):
        dls.Pool("pool", 0, dispatch=d)
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidArgument, match="elasticity"):
        dls.Pool("pool", 2, dispatch=d, elasticity={"kind": "none"})


def test_named_is_lazy_and_ensures_the_row_on_first_use(d: dls.Dispatch) -> None:
    q = SyncFILOQueue.named("fresh", dispatch=d)
    aq = Queue.named("also-fresh", dispatch=d)
    assert isinstance(q, SyncFILOQueue) and isinstance(aq, Queue)
    assert not queue_exists(d, "fresh") and not queue_exists(d, "also-fresh")

    assert q.count() == 0  # count reads rows; it does not need the queue row
    q.claim()
    asyncio.run(aq.claim())

    assert d.queue("fresh").kind == "filo" and d.queue("also-fresh").kind == "fifo"


def test_named_refuses_a_row_of_another_kind_where_the_constructor_trusts_it(
    d: dls.Dispatch,
) -> None:
    SyncQueue("mixed", dispatch=d).submit(1)  # the plane creates it as fifo

    SyncBoltzmannQueue("mixed", dispatch=d).submit(2)  # the constructor: accepted
    with pytest.raises(InvalidArgument, match="'mixed' is a fifo queue on the plane"):
        SyncBoltzmannQueue.named("mixed", dispatch=d).submit(3)

    assert SyncQueue("mixed", dispatch=d).count() == 2
    SyncPriorityQueue.named("mixed", dispatch=d).submit(4)  # priority is fifo order: agrees


def test_bind_moves_a_queue_to_another_plane_with_its_settings(d: dls.Dispatch) -> None:
    q = SyncPriorityQueue("urgent", priority_field="p")

    there = q.bind(d)
    inv = there.submit({"p": 2})

    assert isinstance(there, SyncPriorityQueue) and there.priority_field == "p"
    assert q.bind(d) is there
    assert d.invocation(inv).priority == 2.0


# -- Boltzmann temperature and anneal ---------------------------------------------------------


def test_claims_use_the_temperature_and_the_anneal_schedule_by_claims(d: dls.Dispatch) -> None:
    plane = Recording(d)
    schedule = {"every_claims": 2, "factor": 0.5, "min": 0.3}
    q = SyncBoltzmannQueue("rollouts", dispatch=plane, temperature=2.0, anneal=schedule)  # type: ignore[arg-type]
    q.submit_many([{"i": i} for i in range(6)])

    ran = dls.run_worker(q, burst=True, handler=echo)

    assert ran == 6
    assert plane.temperatures == [2.0, 2.0, 1.0, 1.0, 0.5, 0.5, 0.3]
    assert q.current_temperature() == 0.3


def test_two_workers_with_the_same_schedule_anneal_identically(d: dls.Dispatch) -> None:
    schedule = {"every_claims": 3, "factor": 0.9}
    seen = []
    for name in ("a", "b"):
        q = SyncBoltzmannQueue(name, dispatch=d, temperature=1.0, anneal=schedule)
        q.submit_many(list(range(7)))
        temps = []
        while True:
            temps.append(q.current_temperature())
            if q.claim() is None:
                break
        seen.append(temps)

    assert seen[0] == seen[1]
    assert seen[0][:4] == [1.0, 1.0, 1.0, 0.9]


def test_the_half_life_schedule_follows_the_clock_from_the_first_claim() -> None:
    now = [100.0]
    state = AnnealState(Anneal.parse({"half_life_s": 10, "min": 0.1}, 1.0), 1.0, lambda: now[0])

    assert state.peek() == 1.0  # reading does not start the clock
    now[0] = 500.0
    assert state.current() == 1.0  # the first claim starts it
    now[0] = 510.0
    assert state.current() == 0.5
    now[0] = 520.0
    assert state.current() == 0.25
    now[0] = 10_000.0
    assert state.current() == 0.1


def test_the_schedule_is_a_pure_function_of_claims_and_time() -> None:
    by_claims = Anneal.parse({"every_claims": 100, "factor": 0.9, "min": 0.05}, 1.0)

    assert by_claims.temperature(1.0, claims=99) == 1.0
    assert by_claims.temperature(1.0, claims=200) == pytest.approx(0.81)
    assert by_claims.temperature(1.0, claims=10**6) == 0.05


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"every_claims": 10, "factor": 0.9, "half_life_s": 5}, "one schedule"),
        ({}, "one schedule"),
        ({"every_claims": 10}, "needs a factor"),
        ({"every_claims": 0, "factor": 0.5}, "every_claims"),
        ({"every_claims": 10, "factor": 1.5}, "factor"),
        ({"half_life_s": -1}, "half_life_s"),
        ({"half_life_s": 5, "min": 3.0}, "anneal.min"),
        ({"half_life_s": 5, "step": 1}, "unknown anneal field"),
        ([("half_life_s", 5)], "must be a dict"),
    ],
)
def test_a_bad_schedule_is_refused_at_construction(spec: Any, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        BoltzmannQueue("rollouts", temperature=2.0, anneal=spec)


# -- @udf with a queue name ---------------------------------------------------------------------


def test_udf_picks_the_queue_class_from_its_arguments() -> None:
    plain = dls.udf(echo, queue="tutorial")
    urgent = dls.udf(echo, queue="urgent", priority_field="p")
    rollouts = dls.udf(echo, queue="rollouts", temperature=0.5)
    annealed = dls.udf(echo, queue="rollouts", anneal={"half_life_s": 60})
    stack = dls.udf(echo, queue="stack", kind="filo")

    assert type(plain.queue) is SyncQueue and plain.queue.name == "tutorial"
    assert type(urgent.queue) is SyncPriorityQueue and urgent.queue.priority_field == "p"
    assert type(rollouts.queue) is SyncBoltzmannQueue and rollouts.queue.temperature == 0.5
    assert type(annealed.queue) is SyncBoltzmannQueue and annealed.queue.anneal is not None
    assert type(stack.queue) is SyncFILOQueue


def test_udf_refuses_unknown_arguments_and_arguments_of_another_kind() -> None:
    with pytest.raises(InvalidArgument, match=r"unknown argument temprature=; did you mean"):
        dls.udf(echo, queue="rollouts", temprature=0.5)  # type: ignore[call-overload]
    with pytest.raises(InvalidArgument, match="temperature= is an argument of boltzmann"):
        dls.udf(echo, queue="stack", kind="filo", temperature=0.5)
    with pytest.raises(InvalidArgument, match="belong to the queue"):
        dls.udf(echo, queue=SyncQueue("tutorial"), priority_field="p")
    with pytest.raises(InvalidArgument, match="unknown udf scope"):
        dls.udf(echo, queue="tutorial", scope="session")


def test_udf_with_a_name_submits_to_that_queue_as_a_decorator(d: dls.Dispatch) -> None:
    @dls.udf(queue="urgent", priority_field="p")
    def handle(req: dict[str, int]) -> int:
        return req["p"]

    inv = handle.submit({"p": 3}, _dispatch=d)

    assert d.invocation(inv).queue == "urgent"
    assert d.queue("urgent").kind == "priority"
    assert handle({"p": 4}) == 4


def test_strict_queues_refuse_a_udf_name_that_does_not_exist(
    d: dls.Dispatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    SyncQueue("tutorial", dispatch=d).submit(0)
    typo = dls.udf(echo, queue="tutoorial")
    monkeypatch.setenv("LAKESHORE_STRICT_QUEUES", "1")

    with pytest.raises(NotFound, match=r"'tutoorial' does not exist.*did you mean 'tutorial'"):
        typo.submit(1, _dispatch=d)

    assert not queue_exists(d, "tutoorial")
    dls.udf(echo, queue="tutorial").submit(2, _dispatch=d)  # an existing one is fine


# -- the q module ----------------------------------------------------------------------------------


def test_q_attributes_are_lazy_cached_handles_with_dashes_for_underscores() -> None:
    from dreamlake.lakeshore.q import cpu_prep, tutorial
    from dreamlake.lakeshore.q.boltzmann import rollouts
    from dreamlake.lakeshore.q.filo import preview
    from dreamlake.lakeshore.q.priority import urgent

    q = importlib.import_module("dreamlake.lakeshore.q")
    assert type(tutorial) is Queue and tutorial.name == "tutorial"
    assert cpu_prep.name == "cpu-prep"
    assert q.tutorial is tutorial
    assert type(urgent) is PriorityQueue and type(rollouts) is BoltzmannQueue
    assert type(preview) is FILOQueue and rollouts.sync.temperature == 1.0


def test_q_kind_names_are_the_submodules() -> None:
    from dreamlake.lakeshore.q import priority

    assert priority is importlib.import_module("dreamlake.lakeshore.q.priority")


def test_q_refuses_names_that_are_not_queues() -> None:
    with pytest.raises(ImportError):
        from dreamlake.lakeshore.q import Tutorial  # noqa: F401
    q = importlib.import_module("dreamlake.lakeshore.q")
    with pytest.raises(AttributeError, match="not a queue"):
        q.Tutorial  # noqa: B018
    with pytest.raises(AttributeError):
        q._private  # noqa: B018


def test_the_first_submit_to_a_missing_q_queue_warns_once_with_close_matches(
    d: dls.Dispatch,
) -> None:
    from dreamlake.lakeshore.q import tutoorial

    SyncQueue("tutorial", dispatch=d).submit(0)
    typo = tutoorial.bind(d)

    with pytest.warns(UnknownQueueWarning, match=r"'tutoorial' does not exist.*'tutorial'\?"):
        typo.sync.submit(1)
    typo.sync.submit(2)  # once: a second warning would fail under filterwarnings=error

    assert SyncQueue("tutoorial", dispatch=d).count() == 2


def test_an_existing_q_queue_submits_without_a_warning(d: dls.Dispatch) -> None:
    from dreamlake.lakeshore.q import known

    SyncQueue("known", dispatch=d).submit(0)

    asyncio.run(known.bind(d).submit(1))

    assert SyncQueue("known", dispatch=d).count() == 2


def test_strict_queues_turn_the_q_warning_into_an_error(
    d: dls.Dispatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dreamlake.lakeshore.q.priority import urgnt

    monkeypatch.setenv("LAKESHORE_STRICT_QUEUES", "1")

    with pytest.raises(NotFound, match="'urgnt' does not exist"):
        urgnt.bind(d).sync.submit({"priority": 1})
    assert not queue_exists(d, "urgnt")


def test_a_q_handle_binds_a_udf(d: dls.Dispatch) -> None:
    from dreamlake.lakeshore.q import adder

    SyncQueue("adder", dispatch=d).submit(0)
    f = dls.udf(echo, queue=adder)

    inv = f.submit(5, _dispatch=d)

    assert d.invocation(inv).queue == "adder"
