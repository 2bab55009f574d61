"""A job's `hang_timeout_s` (issue 47, item 6) is kept on its row and handed to each claim of
it, a gang's every part included; a bad one is refused naming it: the same on every plane."""

from __future__ import annotations

import secrets

import pytest
from planes import PlaneEnv

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.types import SubmitRequest
from tests.support import claiming


def _queue(plane: PlaneEnv) -> str:
    name = f"hang-{secrets.token_hex(3)}"
    plane.dispatch.create_queue(name)
    return name


def test_the_row_and_its_claim_carry_the_hang_timeout(plane: PlaneEnv) -> None:
    q = _queue(plane)
    asked, plain = plane.dispatch.submit(
        q, [SubmitRequest(b"a", hang_timeout_s=30), SubmitRequest(b"b")]
    )
    assert plane.dispatch.invocation(asked).hang_timeout_s == 30
    assert plane.dispatch.invocation(plain).hang_timeout_s is None
    listed = {i.id: i.hang_timeout_s for i in plane.dispatch.invocations(queue=q)}
    assert listed == {asked: 30, plain: None}
    claims = [claiming.claim(plane.dispatch, [q], worker=f"w{i}") for i in range(2)]
    assert {c.id: c.hang_timeout_s for c in claims if c is not None} == {asked: 30, plain: None}


def test_every_part_of_a_gang_is_handed_it(plane: PlaneEnv) -> None:
    q = _queue(plane)
    (inv_id,) = plane.dispatch.submit(q, [SubmitRequest(b"g", nodes=2, hang_timeout_s=12.5)])
    parts = [claiming.claim(plane.dispatch, [q], worker=f"w{i}") for i in range(2)]
    assert [p.hang_timeout_s for p in parts if p is not None] == [12.5, 12.5]
    assert plane.dispatch.invocation(inv_id).hang_timeout_s == 12.5


@pytest.mark.parametrize("value", [0, -1, True, "x", 1e9])
def test_a_bad_hang_timeout_is_refused_naming_it(plane: PlaneEnv, value: object) -> None:
    q = _queue(plane)
    with pytest.raises(InvalidArgument, match="hang_timeout_s must be"):
        plane.dispatch.submit(q, [SubmitRequest(b"x", hang_timeout_s=value)])  # type: ignore[arg-type]
    assert plane.dispatch.count(q) == 0
