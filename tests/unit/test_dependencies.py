"""Dependencies on the in-memory plane, for what the conformance suite cannot reach through
the API: the sweep's safety net for a waiting job whose parent row vanished, a long chain
cancelled in one transaction, and `dls.output` markers found and substituted in arguments."""

from __future__ import annotations

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import DispatchError
from dreamlake.lakeshore.plane.dispatch import Dispatch
from dreamlake.lakeshore.types import SubmitRequest
from dreamlake.lakeshore.workflow import outputs_in, substitute


def _job(d: Dispatch, queue: str, after: tuple[str, ...] = (), **kw: object) -> str:
    return d.submit(queue, [SubmitRequest(payload=b"\xc0", after=after, **kw)])[0]  # type: ignore[arg-type]


def test_the_sweep_settles_a_waiting_job_whose_parent_row_vanished() -> None:
    with Dispatch(":memory:") as d:
        parent = _job(d, "q")
        d.store.sweep()  # this process's first sweep, done before the row vanishes
        child = _job(d, "q", (parent,))
        run_anyway = _job(d, "q", (parent,), after_failure="run")
        conn = d.store.connector._conn  # type: ignore[attr-defined]
        conn.execute("DELETE FROM invocations WHERE id = ?", (parent,))  # as no path would
        d.store._judged_at = 0.0  # the safety net runs at the schedulable sweep's cadence
        assert d.store.sweep() == 2
        gone = d.invocation(child)
        assert gone.state == "cancelled" and f"parent {parent} ended gone" in (gone.error or "")
        assert d.invocation(run_anyway).state == "queued"


def test_a_long_chain_is_cancelled_in_the_transaction_that_ends_its_root() -> None:
    with Dispatch(":memory:") as d:
        chain = [_job(d, "q")]
        for _ in range(200):
            chain.append(_job(d, "q", (chain[-1],)))
        assert d.cancel(chain[0])
        assert {d.invocation(i).state for i in chain} == {"cancelled"}
        assert d.count("q", "waiting") == 0


def test_output_markers_are_found_in_nested_arguments_and_substituted() -> None:
    a, b = dls.new_id(), dls.new_id()
    args = (dls.output(a), [1, {"m": dls.output(b)}])
    assert outputs_in(args, {"again": dls.output(a)}) == (a, b)
    got, kw = substitute(args, {"x": dls.output(a)}, {a: dls.encode(3), b: None})
    assert got == (3, [1, {"m": None}]) and kw == {"x": 3}
    with pytest.raises(DispatchError, match=f"output of invocation {b} is not available"):
        substitute((dls.output(b),), {}, {a: dls.encode(3)})
