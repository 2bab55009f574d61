"""Listing pages (`jobs ls`, `GET .../invocations`): keyset pages by `before=`, newest first.

Paging to the end with the last id of each page returns every matching row exactly once, in id
order, for each filter the CLI offers (none, queue, state, both); an id that is not a row's is
still a place to start (issue 17, item 2). The plans behind it are checked in
tests/unit/test_listing_plans.py.
"""

from __future__ import annotations

import pytest
from planes import PlaneEnv

from dreamlake.lakeshore.types import Invocation

FILTERS = {
    "none": {},
    "queue": {"queue": "list-a"},
    "state": {"state": "queued"},
    "queue+state": {"queue": "list-a", "state": "queued"},
}


def seed(plane: PlaneEnv) -> dict[str, tuple[str, str]]:
    """23 jobs in list-a (5 cancelled), 17 in list-b (4 claimed): id -> (queue, state)."""
    a, b = plane.queue("list-a"), plane.queue("list-b")
    rows = {i: ("list-a", "queued") for i in a.submit_many(list(range(23)))}
    rows.update({i: ("list-b", "queued") for i in b.submit_many(list(range(17)))})
    for inv in list(rows)[3:23:4]:
        assert a.cancel(inv)
        rows[inv] = ("list-a", "cancelled")
    for _ in range(4):
        job = b.claim()
        assert job is not None
        rows[job.id] = ("list-b", "running")
    return rows


def page_through(plane: PlaneEnv, limit: int, **filters: str) -> list[Invocation]:
    seen: list[Invocation] = []
    before: str | None = None
    while True:
        page = plane.dispatch.invocations(limit=limit, before=before, **filters)
        assert len(page) <= limit
        if not page:
            return seen
        seen.extend(page)
        before = page[-1].id


@pytest.mark.parametrize("limit", [1, 5, 40])
@pytest.mark.parametrize("name", list(FILTERS))
def test_paging_with_before_lists_each_row_once_newest_first(
    plane: PlaneEnv, name: str, limit: int
) -> None:
    rows = seed(plane)
    filters = FILTERS[name]
    expected = sorted(
        (
            i
            for i, (queue, state) in rows.items()
            if filters.get("queue", queue) == queue and filters.get("state", state) == state
        ),
        reverse=True,
    )

    listed = page_through(plane, limit, **filters)

    assert [inv.id for inv in listed] == expected
    assert all((inv.queue, inv.state) == rows[inv.id] for inv in listed)


def test_a_page_starts_below_any_id_not_only_a_listed_one(plane: PlaneEnv) -> None:
    rows = seed(plane)
    ordered = sorted(rows, reverse=True)
    middle = ordered[10]
    # An id just above `middle` that no row has: the page starts at `middle` itself.
    start = middle + "0"

    page = plane.dispatch.invocations(limit=3, before=start)

    assert [inv.id for inv in page] == ordered[10:13]
    assert plane.dispatch.invocations(limit=3, before=ordered[-1]) == []
