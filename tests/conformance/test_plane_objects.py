"""Objects on every plane: a Ref rides in a payload and back in a result, and the bytes move
only through the object store (the worker is another process, as on a real deployment)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from planes import PlaneEnv

import dreamlake.lakeshore as dls
from dreamlake.lakeshore import codec
from dreamlake.lakeshore.storage import LocalStorage


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[LocalStorage]:
    """A storage both processes reach: the durable tier of the objects here."""
    yield LocalStorage(tmp_path / "objects")


def test_a_ref_in_a_payload_comes_back_as_a_ref_to_the_result(
    plane: PlaneEnv, storage: LocalStorage
) -> None:
    q = plane.queue("objects")
    data = np.arange(50_000, dtype=np.float32)
    ref = dls.put(data, storage=storage.url)
    inv = q.submit({"op": "ref_double", "ref": ref, "storage": storage.url})

    assert plane.peer.call("run_worker", queue="objects", once=True) == 1

    out = q.result(inv, timeout=10.0)
    assert isinstance(out, dls.Ref) and out.durable and out.id != ref.id
    assert np.array_equal(dls.get(out), data * 2)
    # The plane held a few hundred bytes each way, never the array.
    row = q.status(inv)
    assert row.result is not None and len(row.result) < 400
    assert q.result(inv, ref=True) == out  # already a Ref: handed back as it is
    assert sorted(storage.list("_objects/")) == sorted(f"_objects/{r.id}" for r in (ref, out))


def test_a_ref_to_a_missing_object_fails_the_job_with_a_named_error(
    plane: PlaneEnv, storage: LocalStorage
) -> None:
    q = plane.queue("objects")
    ref = dls.put(np.arange(10), storage=storage.url)
    storage.delete(f"_objects/{ref.id}")
    gone = dls.Ref(
        id="0" * 26,
        size=ref.size,
        digest=ref.digest,
        kind=ref.kind,
        dtype=ref.dtype,
        shape=ref.shape,
        host="elsewhere",
        storage=storage.url,
    )
    inv = q.submit({"op": "ref_double", "ref": gone, "storage": storage.url})

    assert plane.peer.call("run_worker", queue="objects", once=True) == 1

    status = q.status(inv)
    assert status.state == "failed" and status.error is not None
    assert "0" * 26 in status.error
    assert codec.decode(codec.encode(gone)) == gone
