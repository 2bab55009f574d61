"""Small pure functions of the server's hot path: ids to times, records to wire maps."""

from __future__ import annotations

from dataclasses import dataclass, field

from ulid import ULID

from dreamlake.lakeshore.ids import ulid_time as submitted_at
from dreamlake.lakeshore.server.wire import to_wire


def test_submitted_at_reads_the_ulid_timestamp() -> None:
    for _ in range(50):
        ulid = ULID()
        assert submitted_at(str(ulid)) == ulid.timestamp


def test_submitted_at_of_something_else_is_none() -> None:
    assert submitted_at("not-a-ulid") is None
    assert submitted_at("!" * 26) is None
    assert submitted_at("") is None


@dataclass
class _Inner:
    n: int


@dataclass
class _Outer:
    name: str
    inner: _Inner
    items: list[_Inner] = field(default_factory=list)
    meta: dict[str, object] = field(default_factory=dict)


def test_records_become_maps_all_the_way_down() -> None:
    record = _Outer("x", _Inner(1), [_Inner(2)], {"k": _Inner(3), "b": b"\x00"})

    assert to_wire([record]) == [
        {"name": "x", "inner": {"n": 1}, "items": [{"n": 2}], "meta": {"k": {"n": 3}, "b": b"\x00"}}
    ]
