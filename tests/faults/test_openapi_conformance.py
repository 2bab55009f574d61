"""The OpenAPI document against the server it describes, as a client generated from it sees it.

A schema fuzzer (schemathesis) builds requests from `/openapi.json` for every operation and
sends them to a real `lakeshore server`; each answer must carry a documented status code, match
the documented schema of that code, and never be a 5xx. The path parameters name things that
exist (a queued job, a registered worker, a schedule) on most examples, so the answers checked
are real rows, not a wall of 404s. Bounded and deterministic: a few examples per operation,
derandomized, no shrinking, and every long-poll `wait` cut to nothing.

Beside it, the document's word on what a request may hold is checked against the server's own
refusals: each body schema closed to unknown fields names the fields the handler accepts, and a
wrong method on every path answers 405 with the Allow header RFC 9110 asks for.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from dreamlake.lakeshore.server.app import all_apis
from dreamlake.lakeshore.server.openapi import document
from tests.support.server import server_process

pytestmark = pytest.mark.slow

#: Examples per operation: 63 operations at this many take well under a minute on 2 cores.
EXAMPLES = 12
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
#: Fields and query parameters that hold a request open: cut to nothing, the answer is the same
#: shape and the run stays bounded.
LONG_POLLS = ("wait", "result_wait")
#: Mostly real rows: three examples in four name what exists, the rest what the fuzzer drew.
REAL = st.integers(0, 3).map(bool)
DOC = document(all_apis())
OPERATIONS = [
    f"{method.upper()} {path}"
    for path, item in DOC["paths"].items()
    for method in item
    if method in ("get", "put", "post", "patch", "delete")
]


class Fixture:
    """A server with a queued job, a worker, a schedule and a queue to act on."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.headers = {"authorization": f"Bearer {token}", "accept": "application/json"}
        with httpx.Client(base_url=url, headers=self.headers, timeout=10) as c:
            ns = "/v1/namespaces/default"
            c.post(f"{ns}/queues", json={"name": "fz"}).raise_for_status()
            jobs = c.post(
                f"{ns}/queues/default/invocations",
                json={"items": [{"json": i} for i in range(20)]},
            )
            jobs.raise_for_status()
            self.job = jobs.json()["ids"][0]
            worker = c.post(f"{ns}/workers", json={"name": "w1"})
            worker.raise_for_status()
            self.worker = worker.json()["id"]
            c.put(f"{ns}/schedules/s1", json={"cron": "0 0 1 1 *", "queue": "fz", "json": 1})
        self.session = requests.Session()
        self.session.headers.update(self.headers)
        self.schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
        self.sent = 0

    def fill(self, path: str) -> str:
        known = self.known(path)
        return re.sub(r"\{(\w+)\}", lambda m: known.get(m[1], "x"), path)

    def known(self, path: str) -> dict[str, str]:
        """Path parameters that name a row that exists."""
        name = "s1" if "/schedules/" in path else "fz"
        return {
            "ns": "default",
            "queue": "default",
            "id": "0" * 26 if "/objects/" in path else self.job,
            "ref": self.worker,
            "name": name,
            "topic": "t",
        }


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fixture]:
    with server_process(tmp_path_factory.mktemp("openapi")) as srv:
        fixture = Fixture(srv.url, srv.token)
        yield fixture
    print(f"openapi conformance: {fixture.sent} generated requests")


def _bounded(case: Any, fixture: Fixture, real: bool) -> None:
    if real:
        known = fixture.known(case.operation.path)
        for key in list(case.path_parameters or {}):
            case.path_parameters[key] = known.get(key, case.path_parameters[key])
    for key in LONG_POLLS:
        if isinstance(case.query, dict) and key in case.query:
            case.query[key] = 0
        if isinstance(case.body, dict) and key in case.body:
            case.body[key] = 0


@pytest.mark.parametrize("label", OPERATIONS)
def test_every_answer_is_the_documented_one(served: Fixture, label: str) -> None:
    """Documented status, documented schema, no 5xx: for every operation, on real rows."""
    method, path = label.split(" ", 1)
    operation = served.schema[path][method]
    strategy = operation.as_strategy()

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy, real=REAL)
    def run(case: Any, real: bool) -> None:
        _bounded(case, served, real)
        served.sent += 1
        case.call_and_validate(base_url=served.url, session=served.session, checks=CHECKS)

    run()


METHODS = ("GET", "PUT", "POST", "PATCH", "DELETE")


def test_a_wrong_method_answers_405_with_allow(served: Fixture) -> None:
    """RFC 9110 15.5.6: a 405 lists the methods the path serves, on every documented path."""
    refused = 0
    with httpx.Client(base_url=served.url, headers=served.headers, timeout=10) as c:
        for path, item in DOC["paths"].items():
            documented = {m.upper() for m in item if m.upper() in METHODS}
            if "GET" in documented:
                documented.add("HEAD")  # starlette answers HEAD wherever it answers GET
            url = served.fill(path)
            for method in set(METHODS) - documented:
                r = c.request(method, url)
                assert r.status_code == 405, (method, path, r.status_code)
                assert r.json()["error"]["code"] == "method_not_allowed"
                allow = {m.strip() for m in r.headers.get("allow", "").split(",") if m.strip()}
                assert allow == documented, (method, path, r.headers.get("allow"))
                refused += 1
    assert refused > 100


#: Fields a handler takes only to refuse them with a message of their own: a schedule fires
#: many jobs, so the one-job fields of a submit are named and refused (routes_schedules.py).
REFUSED_BY_NAME = {"SchedulePut": {"key", "id", "map_id", "delay_s", "at"}}
#: Fields a handler takes before the list its refusal names: a queue's `kind` may be sent as
#: it is (a client echoing a row back), and another is refused as a change (routes_queues.py).
TAKEN_UNLISTED = {"QueuePatch": {"kind"}}
ALLOWED = re.compile(r"(?:allowed|patchable fields): (.*)$")


def test_every_closed_body_names_the_fields_the_server_takes(served: Fixture) -> None:
    """The document closes every request body (additionalProperties: false); the handler's
    refusal of an unknown field lists what it takes: the two lists are the same."""
    schemas = DOC["components"]["schemas"]
    checked = 0
    with httpx.Client(base_url=served.url, headers=served.headers, timeout=10) as c:
        for path, item in DOC["paths"].items():
            for method, op in item.items():
                ref = op.get("requestBody", {}).get("content", {}).get("application/json")
                if not ref:
                    continue
                name = ref["schema"]["$ref"].rsplit("/", 1)[-1]
                name = "SubmitItem" if name == "SubmitBatch" else name
                schema = schemas[name]
                assert schema["additionalProperties"] is False, name
                r = c.request(method.upper(), served.fill(path), json={"zz_unknown": 1})
                assert r.status_code == 400, (method, path, r.status_code, r.text)
                message = r.json()["error"]["message"]
                found = ALLOWED.search(message)
                assert found and "zz_unknown" in message, (method, path, message)
                allowed = {f.strip() for f in found[1].split(",")}
                documented = set(schema["properties"])
                allowed = allowed - REFUSED_BY_NAME.get(name, set()) | TAKEN_UNLISTED.get(
                    name, set()
                )
                assert allowed == documented, (name, message)
                checked += 1
    assert checked > 25
