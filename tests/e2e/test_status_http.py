"""`lakeshore status --url`: the same screen over a real server, read through HttpDispatch.

The test plays a worker (claim, ack) so the rate column has a completion to count, and leaves
jobs queued so depth and the oldest age have something to show.
"""

from __future__ import annotations

import json
import os

from click.testing import CliRunner

from dreamlake.lakeshore.cli.main import cli
from dreamlake.lakeshore.plane import HttpDispatch
from dreamlake.lakeshore.queue import SyncQueue
from tests.support import claiming


def test_status_over_http(server, tenant, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESHORE_")}
    env.update(
        LAKESHORE_URL=server.url,
        LAKESHORE_TOKEN=tenant.token,
        LAKESHORE_NAMESPACE=tenant.namespace,
        LAKESHORE_HOME=str(tmp_path),
    )
    plane = HttpDispatch(server.url, token=tenant.token, namespace=tenant.namespace)
    try:
        plane.create_queue("work")
        q = SyncQueue("work", dispatch=plane)
        for i in range(3):
            q.submit({"i": i})
        worker = plane.register_worker("w-1", queues=["work"], info={"concurrency": 4})
        claim = claiming.claim(plane, ["work"], worker=worker.id, lease_s=30.0, wait_s=5.0)
        assert claim is not None
        plane.ack(claim.id, claim.lease, None)
    finally:
        plane.close()
    runner = CliRunner()
    result = runner.invoke(cli, ["status", "--json"], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    snap = json.loads(result.output)
    assert snap["namespace"] == tenant.namespace
    work = next(r for r in snap["queues"] if r["name"] == "work")
    assert (work["depth"], work["running"], work["daemons"], work["slots"]) == (2, 0, 1, 4)
    assert work["rate_per_s"] > 0 and work["oldest_age_s"] is not None
    assert [d["name"] for d in snap["daemons"]] == ["w-1"]
    table = runner.invoke(cli, ["status"], env=env, catch_exceptions=False, terminal_width=200)
    assert table.exit_code == 0 and "w-1" in table.output and "work" in table.output
