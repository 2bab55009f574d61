"""Dependencies over HTTP with JSON (issue 36, items 4 and 6): a non-Python producer sends
`after` and `after_failure` in submit items, names a parent earlier in the same batch by the id
it minted, and gets the same `waiting` jobs; an unknown parent is a 404 and a bad field a 400,
with nothing stored."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import dreamlake.lakeshore as dls
from tests.support.client import Api


def _submit(api: Api, ns: Callable[[str], str], body: dict[str, object]) -> tuple[int, dict]:  # type: ignore[type-arg]
    return api.call("POST", ns("/queues/deps-json/invocations"), body, as_json=True)


def _state(api: Api, ns: Callable[[str], str], inv: str) -> dict:  # type: ignore[type-arg]
    status, row = api.call("GET", ns(f"/invocations/{inv}"), as_json=True)
    assert status == 200, row
    return row


def test_a_json_batch_names_an_earlier_item_as_a_parent(api: Api, ns: Callable[[str], str]) -> None:
    parent = dls.new_id()
    status, body = _submit(
        api,
        ns,
        {
            "items": [
                {"id": parent, "json": {"step": 1}},
                {"json": {"step": 2}, "after": [parent], "after_failure": "run"},
            ]
        },
    )
    assert status == 201, body
    first, second = body["ids"]
    assert first == parent
    child = _state(api, ns, second)
    assert child["state"] == "waiting"
    assert child["after"] == [parent] and child["waiting_on"] == 1
    status, _ = api.call("POST", ns(f"/invocations/{parent}/cancel"), as_json=True)
    assert status == 200
    assert _state(api, ns, second)["state"] == "queued"  # after_failure=run: it runs anyway


def test_a_cancelled_parent_cancels_the_json_child_naming_it(
    api: Api, ns: Callable[[str], str]
) -> None:
    status, body = _submit(api, ns, {"json": 1})
    (parent,) = body["ids"]
    status, body = _submit(api, ns, {"json": 2, "after": [parent]})
    assert status == 201, body
    api.call("POST", ns(f"/invocations/{parent}/cancel"), as_json=True)
    child = _state(api, ns, body["ids"][0])
    assert child["state"] == "cancelled"
    assert f"parent {parent} ended cancelled" in child["error"]


@pytest.mark.parametrize(
    ("item", "status", "message"),
    [
        ({"after": ["01J0000000000000000000000Z"]}, 404, "unknown parent invocation"),
        ({"after": "01J0000000000000000000000Z"}, 400, "list of invocation ids"),
        ({"after": [7]}, 400, "list of invocation ids"),
        ({"after": [], "after_failure": "ignore"}, 400, "after_failure must be one of"),
        ({"after": ["not an id!"]}, 400, "not an invocation id"),
    ],
)
def test_a_bad_parent_is_refused_naming_it_and_nothing_is_stored(
    api: Api, ns: Callable[[str], str], item: dict[str, object], status: int, message: str
) -> None:
    got, body = _submit(api, ns, {"json": 1, **item})
    assert got == status, body
    assert message in body["error"]["message"]
    got, listed = api.call("GET", ns("/invocations?state=waiting"), as_json=True)
    assert got == 200 and listed["invocations"] == [], listed
