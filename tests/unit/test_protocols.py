"""Pickle protocol negotiation: which protocol a thunk is written in, and what a worker says when
it cannot load one (sdk/protocols.py, docs/sdk.md "Pickle protocols").

The negotiation's per-plane read of the worker rows is counted through a recording wrapper
around a real `Dispatch(":memory:")`; loading failures go through the real codec and a real
in-process worker (`run_worker`).
"""

from __future__ import annotations

import operator
import os
import pickle
import platform
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore import codec, protocols
from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.protocols import ThunkLoadError
from dreamlake.lakeshore.types import SubmitRequest, WorkerInfo

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:  # `tests.support` imports however pytest was started
    sys.path.insert(0, ROOT)

from tests.support.pickles import (  # noqa: E402
    as_if_pickled_by,
    envelope_wire,
    pickle_protocol_of,
)

HERE_PYTHON = platform.python_version()
NEWER = "3.99.0"


@pytest.fixture
def plane() -> Iterator[dls.Dispatch]:
    with dls.Dispatch(":memory:") as d:
        yield d
    protocols.forget()


class ReadCounting:
    """A plane that counts its worker-row reads and passes every call to the real one."""

    def __init__(self, inner: dls.Dispatch) -> None:
        self.inner = inner
        self.reads = 0

    def workers(self) -> list[WorkerInfo]:
        self.reads += 1
        return self.inner.workers()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def advertise(plane: dls.Dispatch, name: str, queue: str, protocol: int) -> WorkerInfo:
    info = {"runtime": {"python": "3.7.17", "highest_pickle_protocol": protocol}}
    return plane.register_worker(name, queues=[queue], info=info)


def thunk_envelope() -> dls.Envelope:
    return dls.Envelope.for_thunk(dls.thunk(operator.add, 1, 2))


# -- the codec: writing --------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", [4, 5])
def test_a_thunk_is_pickled_in_the_protocol_chosen_for_it(protocol: int) -> None:
    # given a protocol chosen around the encode / when a thunk is encoded
    with codec.pickle_protocol(protocol):
        data = codec.encode(thunk_envelope())

    # then the pickle opens with that protocol and the header says so
    assert pickle_protocol_of(data) == protocol
    assert envelope_wire(data)["pickled_by"] == {
        "python": HERE_PYTHON,
        "implementation": sys.implementation.name,
        "protocol": protocol,
        "cloudpickle": protocols.cloudpickle_version(),
    }
    assert codec.decode(data).fn is operator.add


def test_without_a_choice_a_thunk_is_pickled_in_the_default_protocol() -> None:
    assert pickle_protocol_of(codec.encode(thunk_envelope())) == protocols.DEFAULT_PROTOCOL == 5


def test_the_chooser_is_asked_only_when_something_is_pickled() -> None:
    asked: list[int] = []

    def choose() -> int:
        asked.append(4)
        return 4

    with codec.pickle_protocol(choose):
        codec.encode({"plain": [1, 2.0, "data"]})
        assert asked == []
        codec.encode(thunk_envelope())
    assert asked == [4]


@pytest.mark.parametrize("bad", [1, 99, "5", True, None])
def test_an_impossible_protocol_is_refused_naming_what_is_allowed(bad: Any) -> None:
    refused = pytest.raises(InvalidArgument, match=r"pickle protocol must be an int from 2 to \d")
    with refused, codec.pickle_protocol(bad):
        codec.encode(thunk_envelope())


# -- the codec: loading, and saying why not -----------------------------------------------------


def test_a_thunk_from_a_newer_python_names_both_versions() -> None:
    # given a thunk whose header and pickle say a newer Python wrote it in protocol 6
    data = as_if_pickled_by(codec.encode(thunk_envelope()), NEWER, protocol=6)

    # when a worker decodes it / then the error names both sides and the cause
    with pytest.raises(ThunkLoadError) as failure:
        codec.decode(data)
    message = str(failure.value)
    assert f"this thunk was pickled by Python {NEWER} (pickle protocol 6, cloudpickle " in message
    assert (
        f"this worker runs Python {HERE_PYTHON} (highest protocol {pickle.HIGHEST_PROTOCOL}, "
        f"cloudpickle {protocols.cloudpickle_version()})" in message
    )
    assert "unsupported pickle protocol: 6" in message


def test_a_missing_module_names_both_versions() -> None:
    # given a thunk of a function in a module only the producer has
    module = types.ModuleType("lakeshore_producer_only")
    exec("def work():\n    return 1\n", module.__dict__)
    sys.modules[module.__name__] = module
    try:
        data = codec.encode(dls.Envelope.for_thunk(dls.thunk(module.work)))
    finally:
        del sys.modules[module.__name__]

    # when a worker without it decodes it / then the error says what is missing, and who is who
    with pytest.raises(ThunkLoadError, match="No module named 'lakeshore_producer_only'") as e:
        codec.decode(data)
    assert f"pickled by Python {HERE_PYTHON}" in str(e.value)
    assert f"this worker runs Python {HERE_PYTHON}" in str(e.value)


class MakesDir:
    """Unpickling this runs `os.mkdir(path)`: the proof of whether a pickle was loaded."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.mkdir, (str(self.path),)


def test_bytecode_from_another_python_is_refused_before_it_is_unpickled(tmp_path: Path) -> None:
    # given a lambda (pickled by value: its bytecode) and an argument that leaves a mark on load
    marker = tmp_path / "loaded"
    data = codec.encode(dls.Envelope.for_thunk(dls.thunk(lambda m: 1, MakesDir(marker))))
    forged = as_if_pickled_by(data, NEWER)

    # when a worker decodes it as written by another minor version / then it refuses, unloaded
    with pytest.raises(ThunkLoadError, match="functions pickled by value") as failure:
        codec.decode(forged)
    assert f"pickled by Python {NEWER}" in str(failure.value)
    assert not marker.exists()

    # and the same bytes from this Python load (the mark shows they would have run)
    codec.decode(data)
    assert marker.is_dir()


def test_a_bare_thunk_says_its_protocol_from_its_bytes() -> None:
    # given a bare thunk (ext 32, no header) in protocol 6 / when decoded / then named
    inner = bytearray(pickle.dumps(0, protocol=5))
    inner[1] = 6
    data = msgpack.packb(msgpack.ExtType(codec.EXT_THUNK, bytes(inner)), use_bin_type=True)
    with pytest.raises(ThunkLoadError, match=r"does not say which Python pickled it \(pickle "):
        codec.decode(data)
    with pytest.raises(ThunkLoadError, match="protocol 6, read from its bytes"):
        codec.decode(data)


# -- the producer: negotiating with the queue's workers -------------------------------------------


def test_a_submit_writes_the_lowest_protocol_of_the_queues_workers(plane: dls.Dispatch) -> None:
    # given two workers of the queue (protocols 4 and 5) and one of another queue (protocol 3)
    advertise(plane, "old", "neg", 4)
    advertise(plane, "new", "neg", 5)
    advertise(plane, "other", "elsewhere", 3)
    q = dls.SyncQueue("neg", dispatch=plane)

    # when a thunk is submitted / then it is pickled in protocol 4
    q.submit(dls.thunk(operator.add, 1, 2))
    claim = q.claim_raw()
    assert claim is not None and pickle_protocol_of(claim.payload) == 4


def test_workers_that_left_or_drain_do_not_count(plane: dls.Dispatch) -> None:
    old = advertise(plane, "old", "neg", 4)
    advertise(plane, "new", "neg", 5)
    assert protocols.protocol_for(plane, "neg") == 4

    plane.set_worker_state(old.id, "gone")
    protocols.forget(plane)

    assert protocols.protocol_for(plane, "neg") == 5


def test_a_queue_nobody_serves_gets_the_default(plane: dls.Dispatch) -> None:
    advertise(plane, "old", "neg", 4)
    assert protocols.protocol_for(plane, "unserved") == protocols.DEFAULT_PROTOCOL


def test_a_row_from_before_negotiation_counts_as_the_default(plane: dls.Dispatch) -> None:
    plane.register_worker("legacy", queues=["neg"], info={"concurrency": 1})
    plane.register_worker("odd", queues=["neg"], info={"runtime": {"highest_pickle_protocol": 1}})
    advertise(plane, "newer", "neg", 7)

    assert protocols.protocol_for(plane, "neg") == min(5, pickle.HIGHEST_PROTOCOL)


def test_a_worker_on_the_default_queue_serves_default(plane: dls.Dispatch) -> None:
    plane.register_worker("plain", queues=[], info={"runtime": {"highest_pickle_protocol": 4}})
    assert protocols.protocol_for(plane, "default") == 4
    assert protocols.protocol_for(plane, "named") == protocols.DEFAULT_PROTOCOL


def test_the_answer_is_cached_so_a_submit_stays_one_request(plane: dls.Dispatch) -> None:
    # given a producer on a plane that counts its worker-row reads
    counting = ReadCounting(plane)
    advertise(plane, "old", "neg", 4)
    q = dls.SyncQueue("neg", dispatch=counting)  # type: ignore[arg-type]

    # when it submits plain data / then it never reads the rows
    for i in range(5):
        q.submit({"i": i})
    assert counting.reads == 0

    # when it submits many thunks, one at a time and in a batch / then it read them once
    for i in range(20):
        q.submit(dls.thunk(operator.add, i, 1))
    q.submit_many([dls.thunk(operator.add, i, 2) for i in range(20)])
    assert counting.reads == 1

    # and every one of them was written for the old worker
    while (claim := q.claim_raw()) is not None:
        if envelope_wire(claim.payload).get("pickle") is not None:
            assert pickle_protocol_of(claim.payload) == 4


def test_without_the_cache_each_thunk_submit_would_read_the_rows(
    plane: dls.Dispatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the counterfactual of the test above: what the cache saves
    monkeypatch.setattr(protocols, "PROTOCOL_TTL_S", 0.0)
    counting = ReadCounting(plane)
    q = dls.SyncQueue("neg", dispatch=counting)  # type: ignore[arg-type]
    for i in range(3):
        q.submit(dls.thunk(operator.add, i, 1))
    assert counting.reads == 3


class Refusing(ReadCounting):
    """A plane whose token may not list workers (a submit-only token over HTTP)."""

    def workers(self) -> list[WorkerInfo]:
        self.reads += 1
        raise dls.DispatchError("forbidden: GET /workers needs read or work")


def test_a_plane_that_refuses_the_read_gets_the_default_once(plane: dls.Dispatch) -> None:
    refusing = Refusing(plane)
    q = dls.SyncQueue("neg", dispatch=refusing)  # type: ignore[arg-type]
    for i in range(3):
        q.submit(dls.thunk(operator.add, i, 1))
    claim = q.claim_raw()
    assert claim is not None and pickle_protocol_of(claim.payload) == 5
    assert refusing.reads == 1


# -- a real worker -------------------------------------------------------------------------------


def test_a_worker_fails_an_unloadable_thunk_naming_both_versions(plane: dls.Dispatch) -> None:
    # given a job pickled by a newer Python in protocol 6, and an ordinary one after it
    data = as_if_pickled_by(codec.encode(thunk_envelope()), NEWER, protocol=6)
    (bad,) = plane.submit("proto", [SubmitRequest(payload=data)])
    q = dls.SyncQueue("proto", dispatch=plane)
    good = q.submit(dls.thunk(operator.add, 2, 3))

    # when an in-process worker serves the queue until it is empty
    dls.run_worker(plane, ["proto"], burst=True)

    # then the bad job failed on its first attempt, saying both versions; the next one ran
    row = plane.invocation(bad)
    assert (row.state, row.attempt) == ("failed", 1)
    assert f"this thunk was pickled by Python {NEWER} (pickle protocol 6" in (row.error or "")
    assert f"this worker runs Python {HERE_PYTHON}" in (row.error or "")
    assert q.result(good, timeout=5) == 5
