"""One declaration per route (issue 38): the server serves exactly the routes plane/routes.py
declares, the HTTP clients send only those, and what a route is (repeatable on a lost answer,
what /metrics counts it as) is the same as when a URL regex and a side table said it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.plane import routes
from dreamlake.lakeshore.plane.routes import Route
from dreamlake.lakeshore.plane.transport import _repeatable
from dreamlake.lakeshore.server.app import all_apis
from dreamlake.lakeshore.server.metrics import RECORDERS, instrument

ROOT = Path(__file__).resolve().parents[2]
#: The modules that send requests to a control plane.
CLIENTS = (
    "sdk/plane/http.py",
    "sdk/plane/admin.py",
    "sdk/plane/transport.py",
    "sdk/objects/plane.py",
)

#: Written down from the client's URL regex before routes.py replaced it (transport.py's
#: `_REPEATABLE_POSTS`): the POSTs sent to the next replica when one did not answer.
OLD_REPEATABLE_POSTS = re.compile(
    r".*/(queues/[^/]+/invocations|acks|invocations/[^/]+/(ack|end|cancel|frames|checkpoint|cause)"
    r"|leases/renew|runtime/(missing|blobs|manifests)|invocations/[^/]+/gang(/ready|/notice|/progress)?"
    r"|workers/[^/]+/heartbeat|topics/[^/]+/[^/]+/frames)"
)
OLD_IDEMPOTENT = {"GET", "HEAD", "PUT", "DELETE", "OPTIONS"}
REPEATABLE_POSTS = {
    "/v1/namespaces/{ns}/queues/{queue}/invocations",
    "/v1/namespaces/{ns}/acks",
    "/v1/namespaces/{ns}/invocations/{id}/ack",
    "/v1/namespaces/{ns}/invocations/{id}/end",
    "/v1/namespaces/{ns}/invocations/{id}/cancel",
    "/v1/namespaces/{ns}/invocations/{id}/frames",
    "/v1/namespaces/{ns}/invocations/{id}/checkpoint",
    "/v1/namespaces/{ns}/invocations/{id}/cause",
    "/v1/namespaces/{ns}/leases/renew",
    "/v1/namespaces/{ns}/workers/{ref}/heartbeat",
    "/v1/namespaces/{ns}/topics/{queue}/{topic}/frames",
    # job runtimes (issue 46): content-addressed, so sending one twice stores it once
    "/v1/namespaces/{ns}/runtime/missing",
    "/v1/namespaces/{ns}/runtime/blobs",
    "/v1/namespaces/{ns}/runtime/manifests",
    # Issue 47: a gang's read, a part's address or its notice posted again, change nothing
    # twice (a notice keeps the first rank and the earliest end of grace).
    "/v1/namespaces/{ns}/invocations/{id}/gang",
    "/v1/namespaces/{ns}/invocations/{id}/gang/ready",
    "/v1/namespaces/{ns}/invocations/{id}/gang/notice",
    "/v1/namespaces/{ns}/invocations/{id}/gang/progress",
}
#: Written down from server/metrics.py's `COUNTED` before routes.py replaced it.
OLD_COUNTED = {
    ("POST", "/queues/{queue}/invocations"): "submit",
    ("POST", "/claims"): "claim",
    ("POST", "/invocations/{id}/ack"): "ack",
    ("POST", "/acks"): "acks",
    ("POST", "/invocations/{id}/nack"): "nack",
    ("POST", "/invocations/{id}/end"): "end",
    ("POST", "/invocations/{id}/cancel"): "cancel",
    ("POST", "/invocations/{id}/retry"): "retry",
}


def _sample(route: Route) -> str:
    """The route's path with every segment filled, as a client would send it."""
    return route.at(**{p: "x1" for p in route.params}).url_path("ns1")


def test_every_api_entry_serves_a_declared_route_and_every_route_is_served() -> None:
    served = [api.route for api in all_apis()]
    assert all(any(r is d for d in routes.ALL) for r in served), "an Api entry's own Route"
    assert len(set(served)) == len(served), "a route served twice"
    assert set(served) == set(routes.ALL)
    shapes = [(r.method, r.full_path) for r in routes.ALL]
    assert len(set(shapes)) == len(shapes), "two constants declare one route"


def test_repeatable_routes_are_exactly_the_old_regexs() -> None:
    assert {r.full_path for r in routes.ALL if r.method == "POST" and r.repeatable} == (
        REPEATABLE_POSTS
    )
    for route in routes.ALL:
        old = route.method in OLD_IDEMPOTENT or (
            route.method == "POST" and OLD_REPEATABLE_POSTS.fullmatch(_sample(route)) is not None
        )
        assert _repeatable(route) is old, route


def test_counted_routes_are_the_old_table_and_each_has_a_recorder() -> None:
    counted = {(r.method, r.path): r.counts for r in routes.ALL if r.counts}
    assert counted == OLD_COUNTED
    assert set(counted.values()) <= set(RECORDERS)
    wrapped = {
        a.route
        for a, b in zip(all_apis(), instrument(all_apis()), strict=True)
        if a.handler is not b.handler
    }
    assert wrapped == {r for r in routes.ALL if r.counts}


def test_segments_are_escaped_and_a_route_takes_exactly_its_segments() -> None:
    assert (
        routes.QUEUE.at(name="a/b?c%").url_path("n s") == "/v1/namespaces/n%20s/queues/a%2Fb%3Fc%25"
    )
    topic = routes.TOPIC_FRAMES.at(ns="other", queue="q", topic="t")
    assert topic.url_path("mine") == "/v1/namespaces/other/topics/q/t/frames"
    assert routes.FLEET.at().url_path("mine") == "/v1/fleet"
    with pytest.raises(TypeError, match="takes segments"):
        routes.ACK.at()
    with pytest.raises(TypeError, match="takes segments"):
        routes.ACK.at(id="x", queue="q")
    with pytest.raises(InvalidArgument, match="lone surrogate"):
        routes.QUEUE.at(name="\udcff").url_path("ns")
    assert routes.PUT_OBJECT.matches(_sample(routes.PUT_OBJECT))
    assert not routes.PUT_OBJECT.matches(_sample(routes.PUT_OBJECT) + "/x")


def _tree(rel: str) -> ast.Module:
    return ast.parse((ROOT / rel).read_text(), rel)


@pytest.mark.parametrize("rel", CLIENTS)
def test_the_clients_write_no_path_of_their_own(rel: str) -> None:
    """Every request names a declared route: no path text, no URL regex in a client."""
    tree = _tree(rel)
    paths = [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        if re.match(r"/[\w{]", node.value)
    ]
    assert paths == []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "_request"
            and node.args
        ):
            first = node.args[0]
            assert not isinstance(first, ast.Constant | ast.JoinedStr | ast.BinOp), (
                f"{rel}:{node.lineno} sends a path of its own"
            )


def test_routes_module_is_light() -> None:
    """The producer install imports it: the standard library and the SDK's errors only."""
    allowed = {"__future__", "re", "collections.abc", "dataclasses", "typing", "urllib.parse"}
    for node in ast.walk(_tree("sdk/plane/routes.py")):
        if isinstance(node, ast.Import):
            assert {a.name for a in node.names} <= allowed
        elif isinstance(node, ast.ImportFrom):
            assert node.module == "dreamlake.lakeshore.errors" or node.module in allowed
