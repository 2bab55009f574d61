"""Schedules over HTTP with JSON (issue 36, items 3 and 6): a non-Python producer makes, lists,
pauses and removes a schedule with the same JSON a submit item takes; bad input is a 400 naming
what is allowed and stores nothing; a token that may not send code cannot schedule code."""

from __future__ import annotations

from collections.abc import Callable

import msgpack

from dreamlake.lakeshore.plane.dispatch import open_store
from tests.e2e.conftest import Server, Tenant
from tests.support.client import Api

NIGHTLY = {"cron": "0 3 * * *", "tz": "Europe/Berlin", "queue": "eval", "json": {"suite": "full"}}


def test_a_json_schedule_is_made_listed_paused_and_removed(
    api: Api, ns: Callable[[str], str]
) -> None:
    status, made = api.call("PUT", ns("/schedules/nightly"), NIGHTLY, as_json=True)
    assert status == 200, made
    assert (made["name"], made["cron"], made["tz"], made["state"]) == (
        "nightly",
        "0 3 * * *",
        "Europe/Berlin",
        "active",
    )
    assert made["next_fire_at"] > 0 and made["fired"] == 0 and made["missed"] == 0
    status, listed = api.call("GET", ns("/schedules"), as_json=True)
    assert status == 200 and [s["name"] for s in listed["schedules"]] == ["nightly"]
    status, paused = api.call("POST", ns("/schedules/nightly/pause"), as_json=True)
    assert status == 200 and paused["state"] == "paused"
    status, _ = api.call("DELETE", ns("/schedules/nightly"), as_json=True)
    assert status == 204
    status, gone = api.call("GET", ns("/schedules/nightly"), as_json=True)
    assert status == 404 and "unknown schedule 'nightly'" in gone["error"]["message"]


def test_bad_fields_are_a_400_naming_what_is_allowed(api: Api, ns: Callable[[str], str]) -> None:
    for change, says in (
        ({"cron": "every night"}, "five fields"),
        ({"tz": "Moon/Base"}, "unknown time zone"),
        ({"catchup": "most"}, "none|latest|all"),
        ({"key": "k"}, "key"),
        ({"cron": None}, "cron"),
    ):
        body = {k: v for k, v in {**NIGHTLY, **change}.items() if v is not None}
        status, answer = api.call("PUT", ns("/schedules/nightly"), body, as_json=True)
        assert status == 400, (change, answer)
        assert says in answer["error"]["message"], (change, answer)
    status, listed = api.call("GET", ns("/schedules"), as_json=True)
    assert listed["schedules"] == []


def test_a_data_token_schedules_values_but_not_code(
    server: Server, make_tenant: Callable[..., Tenant]
) -> None:
    tenant = make_tenant(prefix="sched-scopes")
    store = open_store(server.store_path)
    try:
        data = store.create_token(tenant.namespace, label="data", scopes=("submit-data", "read"))
        reader = store.create_token(tenant.namespace, label="read", scopes=("read",))
    finally:
        store.close()
    path = f"/v1/namespaces/{tenant.namespace}/schedules/nightly"
    thunk = msgpack.packb(msgpack.ExtType(32, b"\x80\x04N."))  # a pickle, as a thunk rides
    code = {k: v for k, v in NIGHTLY.items() if k != "json"}
    api = Api(server.url, data)
    try:
        status, answer = api.call("PUT", path, {**code, "payload": thunk})
        assert status == 403 and "submit-code" in answer["error"]["message"], answer
        status, answer = api.call("PUT", path, NIGHTLY, as_json=True)
        assert status == 200, answer
    finally:
        api.close()
    api = Api(server.url, reader)
    try:
        status, answer = api.call("PUT", path, NIGHTLY, as_json=True)
        assert status == 403, answer
        status, answer = api.call("GET", path, as_json=True)
        assert status == 200 and answer["name"] == "nightly"
    finally:
        api.close()
