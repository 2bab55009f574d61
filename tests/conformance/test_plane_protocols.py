"""Pickle protocol negotiation on every plane (sdk/protocols.py, docs/sdk.md "Pickle protocols").

A worker row says what its worker can unpickle; a producer reads the rows of its target queue's
live workers and writes the highest protocol all of them load. The rows go through each plane's
own register and list (SQL, or the HTTP routes), so each plane must keep the `info` it was given.
"""

from __future__ import annotations

import operator
import pickle
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from planes import PlaneEnv, eventually

import dreamlake.lakeshore as dls
from dreamlake.lakeshore import protocols
from dreamlake.lakeshore.types import WorkerInfo

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:  # `tests.support` imports however pytest was started
    sys.path.insert(0, ROOT)

from tests.support.pickles import pickle_protocol_of  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_reads() -> Iterator[None]:
    """Each test reads the worker rows anew: a cached answer must not leak between planes."""
    protocols.forget()
    yield
    protocols.forget()


def advertise(plane: PlaneEnv, name: str, queue: str, protocol: int) -> WorkerInfo:
    info: dict[str, Any] = {"runtime": {"python": "3.7.17", "highest_pickle_protocol": protocol}}
    return plane.dispatch.register_worker(name, queues=[queue], info=info)


def submitted_protocol(plane: PlaneEnv, queue: str) -> int:
    """Submit a thunk to `queue` and read back the protocol its pickle was written in."""
    q = plane.queue(queue)
    q.submit(dls.thunk(operator.add, 1, 2))
    claim = q.claim_raw()
    assert claim is not None
    return pickle_protocol_of(claim.payload)


def test_a_workers_row_advertises_what_it_can_load(plane: PlaneEnv) -> None:
    # given a real worker serving a queue on this plane
    stop = threading.Event()
    worker = threading.Thread(
        target=dls.run_worker, args=(plane.dispatch, ["proto"]), kwargs={"stop": stop}
    )
    worker.start()
    try:
        # when its row is read back through the plane
        row = eventually(
            lambda: next((w for w in plane.dispatch.workers() if w.queues == ["proto"]), None)
        )
    finally:
        stop.set()
        worker.join(timeout=30)

    # then it says this Python, its highest pickle protocol and its cloudpickle
    assert row.info["runtime"] == {
        "python": "{}.{}.{}".format(*sys.version_info[:3]),
        "implementation": sys.implementation.name,
        "highest_pickle_protocol": pickle.HIGHEST_PROTOCOL,
        "cloudpickle": protocols.cloudpickle_version(),
    }
    assert not worker.is_alive()


def test_a_producer_writes_the_highest_protocol_all_its_queues_workers_load(
    plane: PlaneEnv,
) -> None:
    # given a queue served by workers loading up to 4 and 5, and another queue's worker at 3
    advertise(plane, "older", "neg", 4)
    advertise(plane, "newer", "neg", 5)
    advertise(plane, "oldest", "elsewhere", 3)

    # when thunks are submitted to each / then each gets what all its own workers load
    assert submitted_protocol(plane, "neg") == 4
    assert submitted_protocol(plane, "elsewhere") == 3
    # and a queue with no worker at all gets the default (a durable queue takes jobs anyway)
    assert submitted_protocol(plane, "unserved") == protocols.DEFAULT_PROTOCOL


def test_a_worker_that_left_no_longer_holds_the_protocol_down(plane: PlaneEnv) -> None:
    older = advertise(plane, "older", "neg", 4)
    advertise(plane, "newer", "neg", 5)
    assert submitted_protocol(plane, "neg") == 4

    plane.dispatch.set_worker_state(older.id, "gone")
    protocols.forget(plane.dispatch)  # the read is cached for PROTOCOL_TTL_S

    assert submitted_protocol(plane, "neg") == 5
