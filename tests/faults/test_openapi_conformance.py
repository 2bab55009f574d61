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
EXAMPLES = 8
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
#: Fields and query parameters that hold a request open: cut to nothing, the answer is the same
#: shape and the run stays bounded.
LONG_POLLS = ("wait", "result_wait")
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

    def known(self, path: str) -> dict[str, str]:
        """Path parameters that name a row that exists."""
        name = "s1" if "/schedules/" in path else "fz"
        return {
            "ns": "default",
            "queue": "default",
            "id": self.job,
            "ref": self.worker,
            "name": name,
            "topic": "t",
        }


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fixture]:
    with server_process(tmp_path_factory.mktemp("openapi")) as srv:
        yield Fixture(srv.url, srv.token)


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
    @given(case=strategy, real=st_booleans())
    def run(case: Any, real: bool) -> None:
        _bounded(case, served, real)
        served.sent += 1
        case.call_and_validate(base_url=served.url, session=served.session, checks=CHECKS)

    run()


def st_booleans() -> Any:
    """Mostly real rows: three of four examples name what exists."""
    return st.integers(0, 3).map(bool)


METHODS = ("GET", "PUT", "POST", "PATCH", "DELETE")


def test_a_wrong_method_answers_405_with_allow(served: Fixture) -> None:
    """RFC 9110 15.5.6: a 405 lists the methods the path serves, on every documented path."""
    refused = 0
    with httpx.Client(base_url=served.url, headers=served.headers, timeout=10) as c:
        for path, item in DOC["paths"].items():
            documented = {m.upper() for m in item if m.upper() in METHODS}
            if "GET" in documented:
                documented.add("HEAD")  # starlette answers HEAD wherever it answers GET
            url = re.sub(r"\{(\w+)\}", lambda m: served.known(path).get(m[1], "x"), path)
            for method in set(METHODS) - documented:
                r = c.request(method, url)
                assert r.status_code == 405, (method, path, r.status_code)
                assert r.json()["error"]["code"] == "method_not_allowed"
                allow = {m.strip() for m in r.headers.get("allow", "").split(",") if m.strip()}
                assert allow == documented, (method, path, r.headers.get("allow"))
                refused += 1
    assert refused > 100
