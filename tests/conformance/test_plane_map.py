"""`map` on every plane (issue 36, item 1): a map's jobs carry its id over every transport, and
`invocations(map_id=...)` lists exactly them, paged like any listing."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from planes import PlaneEnv

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.types import SubmitRequest
from dreamlake.lakeshore.worker import run_worker
from tests.support import claiming


def triple(x: int) -> int:
    return 3 * x


@pytest.fixture
def worked(plane: PlaneEnv) -> Iterator[dls.SyncQueue]:
    q = plane.queue("mapped")
    stop = threading.Event()
    worker = threading.Thread(target=run_worker, args=(q,), kwargs={"stop": stop}, daemon=True)
    worker.start()
    yield q
    stop.set()
    worker.join(timeout=30)


def test_a_map_runs_and_lists_its_jobs(plane: PlaneEnv, worked: dls.SyncQueue) -> None:
    results = worked.map(triple, range(25), chunk_size=4)
    assert list(results) == [3 * x for x in range(25)]
    rows = plane.dispatch.invocations(map_id=results.id)
    assert len(rows) == 7 and all(r.state == "succeeded" for r in rows)
    first = plane.dispatch.invocations(map_id=results.id, limit=4)
    rest = plane.dispatch.invocations(map_id=results.id, limit=4, before=first[-1].id)
    assert [r.id for r in first + rest] == [r.id for r in rows]


def test_a_map_id_is_checked(plane: PlaneEnv) -> None:
    with pytest.raises(InvalidArgument, match="map id must be"):
        plane.dispatch.submit("mapped", [SubmitRequest(payload=b"\xc0", map_id="not/ok")])
    with pytest.raises(InvalidArgument, match="map id must be"):
        plane.dispatch.invocations(map_id="x" * 65)
    assert plane.dispatch.count("mapped") == 0


def test_stats_show_the_progress_of_a_map_in_flight(plane: PlaneEnv) -> None:
    """What `lakeshore status` reads: each map with jobs still to end, its jobs by state."""
    plane.dispatch.create_queue("mapped")
    plane.dispatch.submit("mapped", [SubmitRequest(payload=b"\xc0")] * 3)  # not a map's
    reqs = [SubmitRequest(payload=b"\xc0", map_id="M1")] * 3
    mapped = plane.dispatch.submit("mapped", reqs)
    claimed = claiming.claim_many(plane.dispatch, ["mapped"], worker="w", limit=4)
    assert [c.id for c in claimed][-1] == mapped[0]
    (progress,) = plane.dispatch.stats("mapped")["maps"]
    assert progress == {"map_id": "M1", "jobs": 3, "states": {"running": 1, "queued": 2}}
    for c in claiming.claim_many(plane.dispatch, ["mapped"], worker="w", limit=2):
        plane.dispatch.ack(c.id, c.lease, None)
    assert plane.dispatch.stats("mapped")["maps"] == [
        {"map_id": "M1", "jobs": 3, "states": {"running": 1, "succeeded": 2}}
    ]
