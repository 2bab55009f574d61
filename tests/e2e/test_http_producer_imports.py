"""A producer that only talks HTTP loads neither SQLite nor the SQL store (issue 45).

Its plane is an `HttpDispatch` to a server, so nothing of the embedded plane is of use to it; but
every queue verb sets the caller's plane for the object store, and the object store loaded its
host arena, whose index is SQLite, with the package: the first submit imported `sqlite3`. A fresh
interpreter does what such a script does, against the session's real server, and lists what it
imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.e2e.conftest import Server, Tenant

pytestmark = pytest.mark.slow

#: What the embedded plane brings: SQLite, the SQL store and its planes.
EMBEDDED_PREFIXES = (
    "sqlite3",
    "_sqlite3",
    "dreamlake.lakeshore.plane.store",
    "dreamlake.lakeshore.plane.dispatch",
    "dreamlake.lakeshore.plane.sqlite",
    "dreamlake.lakeshore.plane.postgres",
)

PRODUCER = """
import json, sys
import dreamlake.lakeshore as dls

q = dls.SyncQueue("imports")
inv = q.submit({"x": 1})
print(json.dumps({
    "plane": type(q.dispatch).__name__,
    "http": isinstance(q.dispatch, dls.HttpDispatch),
    "state": q.dispatch.invocation(inv).state,
    "modules": sorted(sys.modules),
}))
"""


def test_an_http_producer_submits_without_loading_sqlite_or_the_store(
    server: Server, tenant: Tenant
) -> None:
    no_proxy = {k: "" for k in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")}
    env = {
        **os.environ,
        **no_proxy,
        "LAKESHORE_URL": server.url,
        "LAKESHORE_TOKEN": tenant.token,
        "LAKESHORE_NAMESPACE": tenant.namespace,
    }

    out = subprocess.run(
        [sys.executable, "-c", PRODUCER],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=env,
    )
    seen = json.loads(out.stdout)

    assert (seen["plane"], seen["http"], seen["state"]) == ("HttpPlane", True, "queued")
    embedded = [m for m in seen["modules"] if m.startswith(EMBEDDED_PREFIXES)]
    assert embedded == []
