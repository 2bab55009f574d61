"""The Queues page over HTTP: every route and its documented status codes."""

from __future__ import annotations

import pytest

DEFAULT_DESCRIPTION = "Default queue (auto-created). Cannot be archived or deleted."


def test_default_queue_materialises_on_first_ls(api, ns):
    status, body = api.call("GET", ns("/queues"))
    assert status == 200
    (row,) = body["queues"]
    assert (row["name"], row["kind"], row["state"]) == ("default", "fifo", "active")
    assert row["description"] == DEFAULT_DESCRIPTION


def test_default_queue_materialises_on_first_show(api, ns):
    status, body = api.call("GET", ns("/queues/default"))
    assert status == 200
    assert body["description"] == DEFAULT_DESCRIPTION
    assert body["members"] == []


def test_create_show_and_conflict(api, ns):
    status, body = api.call(
        "POST",
        ns("/queues"),
        {
            "name": "training-h100",
            "kind": "priority",
            "description": "gpu",
            "elasticity": {"kind": "fixed", "max": 2},
            "admission": {"max_depth": 10},
        },
    )
    assert status == 201
    assert body["kind"] == "priority" and body["elasticity"] == {"kind": "fixed", "max": 2}
    status, shown = api.call("GET", ns("/queues/training-h100"))
    assert status == 200 and shown["admission"] == {"max_depth": 10}
    status, err = api.call("POST", ns("/queues"), {"name": "training-h100"})
    assert status == 409 and err["error"]["code"] == "conflict"


@pytest.mark.parametrize("name", ["Bad", "-lead", "has_underscore", "a" * 200, ""])
def test_invalid_names_are_400(api, ns, name):
    status, err = api.call("POST", ns("/queues"), {"name": name})
    assert status == 400
    assert err["error"]["code"] == "invalid_argument"


def test_unknown_queue_is_404(api, ns):
    for method, path in [
        ("GET", "/queues/nope"),
        ("PATCH", "/queues/nope"),
        ("POST", "/queues/nope/archive"),
        ("POST", "/queues/nope/drain"),
        ("DELETE", "/queues/nope"),
        ("GET", "/queues/nope/events"),
        ("GET", "/queues/nope/stats"),
    ]:
        body = {} if method == "PATCH" else None
        status, err = api.call(method, ns(path), body)
        assert status == 404, (method, path, err)
        assert err["error"]["code"] == "not_found"


def test_ls_filters_by_state(api, ns):
    for name in ("a-one", "a-two"):
        api.call("POST", ns("/queues"), {"name": name})
    api.call("POST", ns("/queues/a-two/archive"))
    _, body = api.call("GET", ns("/queues"), params={"state": "archived"})
    assert [q["name"] for q in body["queues"]] == ["a-two"]
    _, body = api.call("GET", ns("/queues"), params={"state": "active"})
    assert {q["name"] for q in body["queues"]} == {"a-one", "default"}
    status, _err = api.call("GET", ns("/queues"), params={"state": "paused-ish"})
    assert status == 400


def test_lifecycle_drain_archive_unarchive(api, ns):
    api.call("POST", ns("/queues"), {"name": "life"})
    assert api.call("POST", ns("/queues/life/drain"))[1]["state"] == "draining"
    status, _err = api.call("POST", ns("/queues/life/invocations"), {"items": [{"payload": b"x"}]})
    assert status == 409
    assert api.call("POST", ns("/queues/life/archive"))[1]["state"] == "archived"
    assert api.call("POST", ns("/queues/life/unarchive"))[1]["state"] == "active"
    status, _ = api.call("POST", ns("/queues/life/invocations"), {"items": [{"payload": b"x"}]})
    assert status == 201


def test_default_queue_cannot_be_archived_or_deleted(api, ns):
    assert api.call("POST", ns("/queues/default/archive"))[0] == 409
    assert api.call("DELETE", ns("/queues/default"))[0] == 409
    assert api.call("DELETE", ns("/queues/default"), params={"force": "true"})[0] == 409


def test_patch_fields_and_refusals(api, ns):
    api.call("POST", ns("/queues"), {"name": "p"})
    status, body = api.call(
        "PATCH",
        ns("/queues/p"),
        {"description": "h100 production", "admission": {"max_depth": 1000, "on_full": "reject"}},
    )
    assert status == 200
    assert body["description"] == "h100 production"
    assert body["admission"] == {"max_depth": 1000, "on_full": "reject"}
    assert api.call("PATCH", ns("/queues/p"), {"kind": "filo"})[0] == 400
    assert api.call("PATCH", ns("/queues/p"), {"state": "archived"})[0] == 400
    assert api.call("PATCH", ns("/queues/p"), {"admission": {"on_full": "maybe"}})[0] == 400


def test_patch_elasticity_object_replaces_the_policy(api, ns):
    """The Queues page's curl: an elasticity with its kind replaces the policy."""
    api.call("POST", ns("/queues"), {"name": "cpu-prep", "elasticity": {"kind": "fixed", "max": 2}})
    status, body = api.call(
        "PATCH",
        ns("/queues/cpu-prep"),
        {"elasticity": {"kind": "fully_elastic", "max": 8, "pool": "mixed"}},
        as_json=True,
    )
    assert status == 200
    assert body["elasticity"] == {"kind": "fully_elastic", "max": 8, "pool": "mixed"}
    # without a kind, fields merge into the current policy
    _, body = api.call("PATCH", ns("/queues/cpu-prep"), {"elasticity": {"idle_s": 30}})
    assert body["elasticity"] == {"kind": "fully_elastic", "max": 8, "pool": "mixed", "idle_s": 30}
    # the SDK's merge rule refuses a kind change
    status, _ = api.call(
        "PATCH",
        ns("/queues/cpu-prep"),
        {"elasticity": {"kind": "none"}},
        params={"elasticity": "merge"},
    )
    assert status == 400
    # an invalid replacement changes nothing
    status, _ = api.call("PATCH", ns("/queues/cpu-prep"), {"elasticity": {"kind": "elastic"}})
    assert status == 400
    assert api.call("GET", ns("/queues/cpu-prep"))[1]["elasticity"]["kind"] == "fully_elastic"


def test_patch_refuses_an_unknown_elasticity_mode(api, ns):
    """Only `?elasticity=merge` is a mode: a misspelt one is a 400 naming the parameter and
    what it may be, and changes nothing (it was taken as replace mode, issue 45)."""
    api.call("POST", ns("/queues"), {"name": "modes", "elasticity": {"kind": "fixed", "max": 2}})
    status, body = api.call(
        "PATCH",
        ns("/queues/modes"),
        {"elasticity": {"kind": "fully_elastic", "max": 8}},
        params={"elasticity": "bogus"},
        as_json=True,
    )
    assert status == 400
    assert "'elasticity'" in body["error"]["message"] and "merge" in body["error"]["message"]
    assert api.call("GET", ns("/queues/modes"))[1]["elasticity"] == {"kind": "fixed", "max": 2}


def _register(api, ns, name, queues):
    status, worker = api.call("POST", ns("/workers"), {"name": name, "queues": queues})
    assert status == 201
    return worker


def test_rm_refuses_with_members_and_force_scrubs(api, ns):
    api.call("POST", ns("/queues"), {"name": "eval"})
    worker = _register(api, ns, "train-00", ["eval", "other"])
    status, err = api.call("DELETE", ns("/queues/eval"))
    assert status == 409 and "train-00" in err["error"]["message"]
    status, body = api.call("DELETE", ns("/queues/eval"), params={"force": "true"})
    assert status == 204 and body is None
    assert api.call("GET", ns(f"/workers/{worker['id']}"))[1]["queues"] == ["other"]
    assert api.call("GET", ns("/queues/eval"))[0] == 404


def test_show_lists_members(api, ns):
    api.call("POST", ns("/queues"), {"name": "eval"})
    _register(api, ns, "w-a", ["eval"])
    _register(api, ns, "w-b", [])
    _, shown = api.call("GET", ns("/queues/eval"))
    assert [m["name"] for m in shown["members"]] == ["w-a"]
    _, default = api.call("GET", ns("/queues/default"))
    assert [m["name"] for m in default["members"]] == ["w-b"]


def test_membership_edit(api, ns):
    worker = _register(api, ns, "train-01", [])
    status, body = api.call("POST", ns(f"/workers/{worker['id']}/queues"), {"add": ["eval", "x"]})
    assert status == 200 and body["queues"] == ["eval", "x"]
    _, body = api.call("POST", ns("/workers/train-01/queues"), {"remove": ["eval"]})
    assert body["queues"] == ["x"]
    status, err = api.call("POST", ns("/workers/train-01/queues"), {"add": ["default"]})
    assert status == 400 and "empty membership" in err["error"]["message"]
    assert api.call("POST", ns("/workers/nobody/queues"), {"add": ["x"]})[0] == 404
    status, err = api.call("POST", ns("/workers/train-01/queues"), {"add": "eval"})
    assert status == 400 and "'add'" in err["error"]["message"]


def test_events_terse_verbose_and_limit(api, ns):
    api.call("POST", ns("/queues"), {"name": "ev"})
    api.call("POST", ns("/queues/ev/drain"))
    api.call("POST", ns("/queues/ev/unarchive"))
    _, body = api.call("GET", ns("/queues/ev/events"))
    assert [e["kind"] for e in body["events"]] == ["unarchived", "drained", "created"]
    assert "detail" not in body["events"][0]
    _, body = api.call("GET", ns("/queues/ev/events"), params={"verbose": "true", "limit": 1})
    (event,) = body["events"]
    assert event["detail"] == {"from": "draining"}
    assert api.call("GET", ns("/queues/ev/events"), params={"limit": 0})[0] == 400
    assert api.call("GET", ns("/queues/ev/events"), params={"limit": "ten"})[0] == 400
    assert api.call("GET", ns("/queues/ev/events"), params={"verbose": "maybe"})[0] == 400


def test_stats(api, ns):
    api.call("POST", ns("/queues"), {"name": "st"})
    _register(api, ns, "w-st", ["st"])
    api.call(
        "POST", ns("/queues/st/invocations"), {"items": [{"payload": b"1"}, {"payload": b"2"}]}
    )
    status, stats = api.call("GET", ns("/queues/st/stats"))
    assert status == 200
    assert stats["pending"] == 2 and stats["daemon_count"] == 1 and stats["running"] == 0


def test_ls_aggregates_the_org(server, make_tenant):
    from tests.support.client import Api

    a, b = make_tenant(org="acme"), make_tenant(org="acme")
    client = Api(server.url, a.token)
    try:
        client.call("POST", f"/v1/namespaces/{b.namespace}/queues", {"name": "inference"})
        _, body = client.call("GET", f"/v1/namespaces/{a.namespace}/queues")
    finally:
        client.close()
    rows = {(q["namespace"], q["name"]) for q in body["queues"]}
    assert (b.namespace, "inference") in rows
    assert (a.namespace, "default") in rows and (b.namespace, "default") in rows
