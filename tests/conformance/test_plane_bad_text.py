"""What no database holds: every plane refuses it the same way, naming the field, changing nothing.

Postgres text cannot hold NUL (SQLite would have stored it), neither engine stores a lone
surrogate, and both keep integers in 64 bits. The planes must agree, so the check sits where the
store's input meets SQL (plane/queries.py: `check_params`), and the HTTP client refuses what its
wire cannot carry before sending it. A worker's own error text is the exception: it is stored
with those characters escaped, since refusing it would leave the attempt unsettled.
"""

from __future__ import annotations

import pytest
from planes import PlaneEnv

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.types import SubmitRequest
from tests.support import claiming

NUL = "a\x00b"
SURROGATE = "a\ud800b"


def _queue_names(plane: PlaneEnv) -> list[str]:
    return [q.name for q in plane.dispatch.queues()]


@pytest.mark.parametrize("text", [NUL, SURROGATE], ids=["nul", "lone-surrogate"])
def test_a_key_that_no_database_holds_is_refused_and_creates_nothing(
    plane: PlaneEnv, text: str
) -> None:
    with pytest.raises(InvalidArgument, match="key"):
        plane.dispatch.submit("bad-key", [SubmitRequest(b"\xc0", key=text)])

    assert "bad-key" not in _queue_names(plane)  # the queue the submit would have made


@pytest.mark.parametrize("text", [NUL, SURROGATE], ids=["nul", "lone-surrogate"])
def test_a_description_that_no_database_holds_is_refused(plane: PlaneEnv, text: str) -> None:
    with pytest.raises(InvalidArgument, match="description"):
        plane.dispatch.create_queue("described", description=text)
    assert "described" not in _queue_names(plane)

    plane.dispatch.create_queue("described", description="kept")
    with pytest.raises(InvalidArgument, match="description"):
        plane.dispatch.patch_queue("described", {"description": text})
    assert plane.dispatch.queue("described").description == "kept"


def test_a_nul_in_an_id_or_a_worker_field_is_refused(plane: PlaneEnv) -> None:
    with pytest.raises(InvalidArgument, match="NUL"):
        plane.dispatch.invocation("01J0000000000000000000000\x00")
    with pytest.raises(InvalidArgument, match="host"):
        plane.dispatch.register_worker("w-nul", host="box\x00")
    assert "w-nul" not in [w.name for w in plane.dispatch.workers()]


@pytest.mark.parametrize("number", [2**63, 10**30], ids=["2**63", "10**30"])
def test_policy_numbers_past_64_bits_are_refused_on_every_plane(
    plane: PlaneEnv, number: int
) -> None:
    with pytest.raises(InvalidArgument, match="max_depth"):
        plane.dispatch.create_queue("deep", admission={"max_depth": number})
    with pytest.raises(InvalidArgument, match="max"):
        plane.dispatch.create_queue("wide", elasticity={"kind": "fixed", "max": number})
    assert not {"deep", "wide"} & set(_queue_names(plane))

    plane.dispatch.create_queue("deep", admission={"max_depth": 2**63 - 1})
    assert plane.dispatch.queue("deep").admission == {"max_depth": 2**63 - 1}


@pytest.mark.parametrize("number", [float("inf"), float("nan")], ids=["inf", "nan"])
def test_policy_numbers_that_are_not_finite_are_refused(plane: PlaneEnv, number: float) -> None:
    with pytest.raises(InvalidArgument, match="max_depth"):
        plane.dispatch.create_queue("inf-deep", admission={"max_depth": number})
    with pytest.raises(InvalidArgument, match="max"):
        plane.dispatch.create_queue("inf-wide", elasticity={"kind": "fixed", "max": number})
    assert not {"inf-deep", "inf-wide"} & set(_queue_names(plane))


def test_a_frame_cursor_past_64_bits_is_refused(plane: PlaneEnv) -> None:
    inv = plane.queue("cursor").submit(1)

    with pytest.raises(InvalidArgument, match="since"):
        plane.dispatch.frames(inv, since=2**63)


def test_a_workers_error_text_is_stored_with_nul_and_surrogates_escaped(plane: PlaneEnv) -> None:
    inv = plane.queue("escaped").submit(1)
    claim = claiming.claim(plane.dispatch, ["escaped"], worker="w")
    assert claim is not None and claim.id == inv

    plane.dispatch.nack(claim.id, claim.lease, error="boom\x00 at \udcff", retry=False)

    row = plane.dispatch.invocation(inv)
    assert row.state == "failed"
    assert row.error == "boom\\x00 at \\udcff"
