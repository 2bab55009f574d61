"""Locality on every plane: a job hinted at a host goes to a worker there first, to anyone
once its queue's `locality_wait_s` has passed (docs/objects.md, sdk/plane/locality.py).

Two workers on two hosts claim from one queue: the test process and its peer (a second
process on the multi-process planes), each naming a host id. Windows are either long (the
outcome inside them is certain) or short and waited out by a claim's own long-poll; the row's
`created_at` and `started_at` then say how long the job was held.
"""

from __future__ import annotations

import pytest
from planes import PlaneEnv

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.types import SubmitRequest
from tests.support import claiming

LONG_S = 60.0


def hinted(plane: PlaneEnv, queue: str, host: str | None, *, priority: float = 0.0) -> str:
    request = SubmitRequest(payload=dls.encode(host), host=host, priority=priority)
    (inv,) = plane.dispatch.submit(queue, [request])
    return inv


def claimed(plane: PlaneEnv, queue: str, host: str | None, **kw: object) -> list[str]:
    """Ids claimed by a worker in this process that names `host`."""
    got = claiming.claim_many(plane.dispatch, [queue], worker="w-here", host=host, **kw)
    return [c.id for c in got]


def test_a_hinted_job_waits_for_a_worker_on_its_host(plane: PlaneEnv) -> None:
    plane.dispatch.create_queue("loc", admission={"locality_wait_s": LONG_S})
    inv = hinted(plane, "loc", "host-a")

    assert plane.peer.call("claim_on_host", queue="loc", host="host-b") == []
    assert claimed(plane, "loc", None, limit=1) == []  # a claimer on no host waits too
    assert claimed(plane, "loc", "host-a", limit=1) == [inv]


def test_after_its_window_a_worker_on_any_host_takes_it(plane: PlaneEnv) -> None:
    wait = 0.4
    plane.dispatch.create_queue("loc", admission={"locality_wait_s": wait})
    inv = hinted(plane, "loc", "host-a")

    # The peer's claim long-polls: the window's end wakes it (nothing is committed then).
    assert plane.peer.call("claim_on_host", queue="loc", host="host-b", wait=20.0) == [inv]

    row = plane.dispatch.invocation(inv)
    assert row.state == "running" and row.started_at is not None
    assert row.started_at - row.created_at >= wait


def test_no_hint_or_no_wait_means_anyone_at_once(plane: PlaneEnv) -> None:
    plane.dispatch.create_queue("held", admission={"locality_wait_s": LONG_S})
    plane.dispatch.create_queue("free", admission={"locality_wait_s": 0})
    plain = hinted(plane, "held", None)
    unheld = hinted(plane, "free", "host-a")

    assert plane.peer.call("claim_on_host", queue="held", host="host-b") == [plain]
    assert plane.peer.call("claim_on_host", queue="free", host="host-b") == [unheld]


@pytest.mark.parametrize("kind", ["fifo", "filo", "boltzmann"])
def test_claim_order_holds_among_the_jobs_a_host_may_take(plane: PlaneEnv, kind: str) -> None:
    plane.dispatch.create_queue("loc", kind=kind, admission={"locality_wait_s": LONG_S})
    for_a = hinted(plane, "loc", "host-a", priority=5)
    for_b = hinted(plane, "loc", "host-b", priority=3)
    anyone = hinted(plane, "loc", None, priority=1)

    # Strict priority for boltzmann (temperature 0): the order is certain on every kind.
    order = claimed(plane, "loc", "host-b", limit=3, kind=kind, temperature=0.0)
    assert order == [for_b, anyone]
    assert claimed(plane, "loc", "host-a", limit=3, kind=kind, temperature=0.0) == [for_a]


def test_the_wait_is_a_queue_setting_with_a_small_default(plane: PlaneEnv) -> None:
    plane.dispatch.create_queue("loc")
    assert plane.dispatch.stats("loc")["locality_wait_s"] == 0.5

    info = plane.dispatch.patch_queue("loc", {"admission": {"locality_wait_s": 2}})
    assert info.admission["locality_wait_s"] == 2
    assert plane.dispatch.stats("loc")["locality_wait_s"] == 2

    for bad in (-1, "soon", 1e9, True):
        with pytest.raises(InvalidArgument, match=r"admission\.locality_wait_s"):
            plane.dispatch.patch_queue("loc", {"admission": {"locality_wait_s": bad}})


@pytest.mark.parametrize("host", ["", "host a", "-lead", "x" * 129, "naïve"])
def test_a_bad_host_is_refused_naming_it(plane: PlaneEnv, host: str) -> None:
    with pytest.raises(InvalidArgument, match=r"host'? must be a host id"):
        plane.dispatch.submit("loc", [SubmitRequest(payload=dls.encode(1), host=host)])
    with pytest.raises(InvalidArgument, match=r"host'? must be a host id"):
        claiming.claim(plane.dispatch, ["loc"], worker="w-here", host=host)
    with pytest.raises(InvalidArgument, match=r"host'? must be a host id"):
        plane.dispatch.register_worker("w-bad-host", queues=["loc"], host=host)
    assert plane.dispatch.count("loc") == 0


def test_a_worker_row_advertises_its_host(plane: PlaneEnv) -> None:
    row = plane.dispatch.register_worker("w-on-a", queues=["loc"], host="host-a.example")
    assert row.host == "host-a.example"
    assert plane.dispatch.worker("w-on-a").host == "host-a.example"
