"""A udf carries its call defaults (issue 45, item 7): `@dls.udf(max_attempts=1, ...)` reaches
the stored invocation row, a call's `_max_attempts=` (or a map's `max_attempts=`) wins, and a
bad value is refused naming the argument, with nothing stored."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.worker import run_worker


def double(x: int) -> int:
    return 2 * x


@pytest.fixture
def plane() -> Iterator[dls.Dispatch]:
    with dls.Dispatch(":memory:") as plane:
        yield plane


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_udf_defaults_reach_the_row_and_a_call_overrides_them(
    plane: dls.Dispatch, kind: str
) -> None:
    q = (
        dls.SyncQueue("carry", dispatch=plane)
        if kind == "sync"
        else dls.Queue("carry", dispatch=plane)
    )
    f = dls.udf(double, queue=q, max_attempts=1, timeout_s=7.5, priority=2, max_preemptions=4)

    plain = plane.invocation(f.submit(1))
    override = plane.invocation(f.submit(2, _max_attempts=5, _timeout_s=None, _priority=9))
    assert (plain.max_attempts, plain.timeout_s, plain.priority) == (1, 7.5, 2)
    assert (override.max_attempts, override.timeout_s, override.priority) == (5, None, 9)
    assert (plain.max_preemptions, override.max_preemptions) == (4, 4)


def test_a_maps_items_carry_the_udfs_defaults_and_its_own_options_win(
    plane: dls.Dispatch,
) -> None:
    q = dls.SyncQueue("carry", dispatch=plane)
    f = dls.udf(double, queue=q, max_attempts=1, timeout_s=30.0)
    stop = threading.Event()
    worker = threading.Thread(target=run_worker, args=(q,), kwargs={"stop": stop}, daemon=True)
    worker.start()
    try:
        assert list(f.map([1, 2])) == [2, 4]
        assert list(f.map([3], max_attempts=4)) == [6]
    finally:
        stop.set()
        worker.join(timeout=30)
    rows = sorted(plane.invocations(queue="carry"), key=lambda inv: inv.id)  # oldest first
    assert [(r.max_attempts, r.timeout_s) for r in rows][-1] == (4, 30.0)
    assert {(r.max_attempts, r.timeout_s) for r in rows[:-1]} == {(1, 30.0)}


def test_a_bad_default_or_override_is_refused_and_nothing_stored(plane: dls.Dispatch) -> None:
    q = dls.SyncQueue("carry", dispatch=plane)
    with pytest.raises(InvalidArgument, match=r"max_attempts= must be an integer 1\.\.1000"):
        dls.udf(double, queue=q, max_attempts=0)
    with pytest.raises(InvalidArgument, match="timeout_s= must be a positive number"):
        dls.udf(double, queue=q, timeout_s=-1)
    with pytest.raises(InvalidArgument, match="unknown argument max_atempts=; did you mean"):
        dls.udf(double, queue=q, max_atempts=2)  # type: ignore[call-overload]
    f = dls.udf(double, queue=q, max_attempts=2)
    with pytest.raises(InvalidArgument, match=r"_max_preemptions= must be an integer 0\.\."):
        f.submit(1, _max_preemptions="many")
    with pytest.raises(InvalidArgument, match="_priority= must be a finite number"):
        f.submit(1, _priority=float("nan"))
    assert q.count("queued") == 0
