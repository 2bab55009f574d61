"""Locality with real processes: two daemons on "two hosts" of one box, and the HTTP refusals.

Two hosts on one box means two host ids (`LAKESHORE_HOST_ID`) and two host tiers
(`LAKESHORE_OBJECTS`), sharing one file:// storage tier: a daemon on host-b that reads an
object put on host-a must fetch it, as a daemon on another box would.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jobs
import numpy as np
import pytest
from click.testing import CliRunner
from daemon_harness import DaemonProcess

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.cli.main import cli
from dreamlake.lakeshore.objects.arena import close_arena
from dreamlake.lakeshore.plane import HttpDispatch

pytestmark = pytest.mark.slow


@pytest.fixture
def two_hosts(
    server: Any, tenant: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[HttpDispatch, str, Callable[[str, list[str]], DaemonProcess]]]:
    """A plane, the shared storage URL, and a way to start a daemon on a named host. This
    process puts its objects as host-a (its host tier is host-a's)."""
    storage = f"file://{tmp_path / 'storage'}"
    tier_a = tmp_path / "objects-a"
    monkeypatch.setenv("LAKESHORE_HOST_ID", "host-a")
    monkeypatch.setenv("LAKESHORE_OBJECTS", str(tier_a))
    started: list[DaemonProcess] = []

    def daemon(host: str, queues: list[str]) -> DaemonProcess:
        env = {
            "LAKESHORE_URL": server.url,
            "LAKESHORE_TOKEN": tenant.token,
            "LAKESHORE_NAMESPACE": tenant.namespace,
            "LAKESHORE_HOST_ID": host,
            "LAKESHORE_OBJECTS": str(tmp_path / f"objects-{host.removeprefix('host-')}"),
            "LAKESHORE_STORAGE": storage,
        }
        args = [a for q in queues for a in ("-q", q)]
        started.append(DaemonProcess(tmp_path / host, f"on-{host}", args, env=env))
        return started[-1]

    plane = HttpDispatch(server.url, token=tenant.token, namespace=tenant.namespace)
    try:
        yield plane, storage, daemon
    finally:
        for proc in started:
            proc.stop()
        plane.close()
        close_arena(tier_a)


def test_jobs_go_to_the_host_holding_their_ref_then_to_anyone_after_the_wait(
    two_hosts: tuple[HttpDispatch, str, Callable[[str, list[str]], DaemonProcess]],
) -> None:
    plane, storage, daemon = two_hosts
    plane.create_queue("near", admission={"locality_wait_s": 60})
    plane.create_queue("far", admission={"locality_wait_s": 0.3})
    on_a = daemon("host-a", ["near"])
    on_b = daemon("host-b", ["near", "far"])
    on_a.ready()
    on_b.ready()
    assert {w.host for w in plane.workers()} == {"host-a", "host-b"}

    array = np.ones(1 << 18, dtype=np.float32)  # 1 MiB: above the inline limit
    ref = dls.put(array, storage=storage)
    assert ref.host == "host-a"

    near = dls.SyncQueue("near", dispatch=plane)
    ids = [near.submit(dls.thunk(jobs.host_that_read, ref)) for _ in range(4)]
    done = [near.result(i, timeout=30) for i in ids]
    # host-b was idle all along, and never took a job held for host-a
    assert done == [{"host": "host-a", "sum": float(1 << 18)}] * 4

    far = dls.SyncQueue("far", dispatch=plane)
    inv = far.submit(dls.thunk(jobs.host_that_read, ref))
    # nobody on host-a serves "far": host-b takes it once the wait is over, and fetches
    assert far.result(inv, timeout=30) == {"host": "host-b", "sum": float(1 << 18)}
    row = plane.invocation(inv)
    assert row.started_at is not None and row.started_at - row.created_at >= 0.3


def test_bad_hosts_and_waits_are_400s_naming_the_field(api: Any, ns: Callable[[str], str]) -> None:
    status, body = api.call(
        "POST", ns("/queues/loc/invocations"), {"items": [{"payload": b"\x01", "host": "a b"}]}
    )
    assert status == 400 and "field 'items[0].host' must be a host id" in body["error"]["message"]
    status, body = api.call("POST", ns("/claims"), {"worker": "w", "host": ".hidden"})
    assert status == 400 and "field 'host' must be a host id" in body["error"]["message"]
    status, body = api.call("POST", ns("/workers"), {"name": "w", "host": 7})
    assert status == 400 and "'host'" in body["error"]["message"]
    status, body = api.call(
        "POST", ns("/queues"), {"name": "loc", "admission": {"locality_wait_s": -1}}
    )
    assert status == 400 and "admission.locality_wait_s" in body["error"]["message"]


def test_the_wait_is_set_and_shown_by_the_queue_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("LAKESHORE_URL", "LAKESHORE_TOKEN", "LAKESHORE_NAMESPACE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("LAKESHORE_HOME", str(tmp_path))
    runner = CliRunner()

    added = runner.invoke(cli, ["queues", "add", "loc", "--locality-wait-s", "2"])
    assert added.exit_code == 0, added.output
    stats = runner.invoke(cli, ["queues", "stats", "loc", "--json"])
    assert json.loads(stats.output)["locality_wait_s"] == 2
    assert runner.invoke(cli, ["queues", "patch", "loc", "--locality-wait-s", "0"]).exit_code == 0
    shown = runner.invoke(cli, ["queues", "show", "loc", "--json"])
    assert json.loads(shown.output)["admission"] == {"locality_wait_s": 0}
    refused = runner.invoke(cli, ["queues", "patch", "loc", "--locality-wait-s", "-1"])
    assert refused.exit_code == 2 and "--locality-wait-s" in refused.output
