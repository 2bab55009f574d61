"""Issue 47's options reach every place a job is made: `nodes` (a gang's width) and
`hang_timeout_s` (the silence that makes a hang) on `submit_many` and its async twin, as a
udf's defaults and a call's `_nodes=` / `_hang_timeout_s=`, and on the HTTP submit item; a bad
value is refused naming the field, before anything is stored.

Read back from a real embedded plane: what is checked is what the producer sent and the plane
kept."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.plane.store.records import check_hang_timeout, check_submit
from dreamlake.lakeshore.plane.wire import submit_item
from dreamlake.lakeshore.server.openapi_schemas import SCHEMAS
from dreamlake.lakeshore.server.routes_invocations import ITEM_FIELDS
from dreamlake.lakeshore.types import MAX_HANG_TIMEOUT_S, MAX_NODES, SubmitRequest


def double(x: int) -> int:
    return 2 * x


@pytest.fixture
def plane() -> Iterator[dls.Dispatch]:
    with dls.Dispatch(":memory:") as plane:
        yield plane


def stored(plane: dls.Dispatch, ids: Sequence[str]) -> list[tuple[int, float | None]]:
    """What the plane keeps of each job's width and hang timeout."""
    return [(plane.invocation(i).nodes, plane.invocation(i).hang_timeout_s) for i in ids]


def test_submit_many_makes_each_job_a_gang_of_its_width(plane: dls.Dispatch) -> None:
    q = dls.SyncQueue("gangs", dispatch=plane)
    ids = q.submit_many([1, 2], nodes=2, hang_timeout_s=30)
    assert stored(plane, ids) == [(2, 30), (2, 30)]
    assert stored(plane, q.submit_many([3])) == [(1, None)]


def test_the_async_twin_passes_them_on(plane: dls.Dispatch) -> None:
    q = dls.Queue("gangs", dispatch=plane)
    ids = asyncio.run(q.submit_many([1], nodes=3, hang_timeout_s=5.5))
    ids.append(asyncio.run(q.submit(2, nodes=4, hang_timeout_s=60)))
    assert stored(plane, ids) == [(3, 5.5), (4, 60)]


@pytest.mark.parametrize("nodes", [0, -1, MAX_NODES + 1, True, 1.5, "2"])
def test_a_bad_width_in_a_batch_is_refused_naming_nodes(plane: dls.Dispatch, nodes: Any) -> None:
    q = dls.SyncQueue("gangs", dispatch=plane)
    with pytest.raises(InvalidArgument, match=r"^nodes must be a whole number 1\.\.256"):
        q.submit_many([1, 2], nodes=nodes)
    assert q.count("queued") == 0


def test_a_batch_of_gangs_is_stored_with_their_width(plane: dls.Dispatch) -> None:
    q = dls.SyncQueue("gangs", dispatch=plane)
    ids = q.submit_many([1, 2], nodes=2)
    assert [plane.invocation(i).nodes for i in ids] == [2, 2]


def test_a_udf_carries_nodes_and_hang_timeout_and_a_call_overrides_them(
    plane: dls.Dispatch,
) -> None:
    q = dls.SyncQueue("gangs", dispatch=plane)
    f = dls.udf(double, queue=q, nodes=2, hang_timeout_s=30)
    ids = [f.submit(1), f.submit(2, _nodes=3, _hang_timeout_s=None)]
    ids.append(dls.udf(double, queue=q).submit(3))
    assert stored(plane, ids) == [(2, 30), (3, None), (1, None)]
    # A map's jobs take the udf's defaults and its own keywords over them, each request made
    # as the map makes it (sdk/mapping.py: the queue's `_request` with the map's options).
    req = q._request(envelope=f.envelope(4), **f._map_options({"nodes": 4}))
    assert (req.nodes, req.hang_timeout_s) == (4, 30)


def test_a_bad_udf_default_or_override_is_refused_naming_it(plane: dls.Dispatch) -> None:
    q = dls.SyncQueue("gangs", dispatch=plane)
    with pytest.raises(InvalidArgument, match=r"^nodes= must be an integer 1\.\.256"):
        dls.udf(double, queue=q, nodes=0)
    with pytest.raises(InvalidArgument, match=r"^hang_timeout_s= must be a positive number"):
        dls.udf(double, queue=q, hang_timeout_s=-1)
    f = dls.udf(double, queue=q)
    with pytest.raises(InvalidArgument, match=r"^_nodes= must be an integer 1\.\.256"):
        f.submit(1, _nodes=True)
    with pytest.raises(InvalidArgument, match=r"^_hang_timeout_s= must be a positive number"):
        f.submit(1, _hang_timeout_s=MAX_HANG_TIMEOUT_S * 2)
    assert q.count("queued") == 0


@pytest.mark.parametrize(
    "value", [0, -1, True, False, "x", 1e9, math.nan, math.inf, MAX_HANG_TIMEOUT_S + 1]
)
def test_a_bad_hang_timeout_is_refused_naming_it(plane: dls.Dispatch, value: Any) -> None:
    with pytest.raises(InvalidArgument, match=r"^hang_timeout_s must be a number of seconds"):
        check_submit(SubmitRequest(payload=b"x", hang_timeout_s=value))
    q = dls.SyncQueue("gangs", dispatch=plane)
    with pytest.raises(InvalidArgument, match=r"^hang_timeout_s must be"):
        q.submit(1, hang_timeout_s=value)
    assert q.count("queued") == 0


@pytest.mark.parametrize("value", [None, 30, 0.5, MAX_HANG_TIMEOUT_S])
def test_a_hang_timeout_in_range_passes(value: float | None) -> None:
    check_submit(SubmitRequest(payload=b"x", hang_timeout_s=value))
    assert check_hang_timeout(value) == value


def test_the_http_item_carries_hang_timeout_only_when_set() -> None:
    assert "hang_timeout_s" not in submit_item(SubmitRequest(payload=b"x"))
    assert submit_item(SubmitRequest(payload=b"x", hang_timeout_s=30))["hang_timeout_s"] == 30
    assert "hang_timeout_s" in ITEM_FIELDS
    item = SCHEMAS["SubmitItem"]["properties"]["hang_timeout_s"]
    assert (item["exclusiveMinimum"], item["maximum"]) == (0, MAX_HANG_TIMEOUT_S)
