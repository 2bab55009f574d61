"""Delays over HTTP with JSON (issue 36, item 2): a non-Python producer sends `delay_s`, or
`at` as epoch seconds or an ISO 8601 time, in a submit item, and gets the same `scheduled` job."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

import pytest

from tests.support.client import Api


def _submit(api: Api, ns: Callable[[str], str], item: dict[str, object]) -> tuple[int, dict]:  # type: ignore[type-arg]
    return api.call("POST", ns("/queues/later/invocations"), {"json": 1, **item}, as_json=True)


@pytest.mark.parametrize(
    "item",
    [
        {"delay_s": 3600},
        {"at": time.time() + 3600},
        {"at": (dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)).isoformat()},
        {"at": (dt.datetime.utcnow() + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S")},
    ],
    ids=["delay_s", "at-epoch", "at-iso-zoned", "at-iso-naive-utc"],
)
def test_a_json_item_with_a_delay_is_scheduled(
    api: Api, ns: Callable[[str], str], item: dict[str, object]
) -> None:
    status, body = _submit(api, ns, item)
    assert status == 201, body
    (inv,) = body["ids"]
    status, row = api.call("GET", ns(f"/invocations/{inv}"), as_json=True)
    assert status == 200 and row["state"] == "scheduled"


def test_a_past_iso_time_queues_at_once(api: Api, ns: Callable[[str], str]) -> None:
    status, body = _submit(api, ns, {"at": "2020-01-01T00:00:00Z"})
    assert status == 201, body
    status, row = api.call("GET", ns(f"/invocations/{body['ids'][0]}"), as_json=True)
    assert row["state"] == "queued"


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ({"at": "tomorrow"}, "ISO 8601"),
        ({"delay_s": -5}, "delay_s must be"),
        ({"delay_s": 5, "at": "2030-01-01T00:00:00Z"}, "not both"),
    ],
)
def test_a_bad_delay_is_a_400_naming_it(
    api: Api, ns: Callable[[str], str], item: dict[str, object], message: str
) -> None:
    status, body = _submit(api, ns, item)
    assert status == 400, body
    assert message in body["error"]["message"]
