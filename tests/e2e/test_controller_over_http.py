"""The controller run against a server over HTTP (`lakeshore-controller --url`), not its database.

A test that ticks starts its own server: the controller reads every namespace's fleet, so a
shared server would hand it other tests' queues. The tests that only call the fleet routes
share one for the module.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from dreamlake.lakeshore.controller.loop import Controller, Settings
from dreamlake.lakeshore.controller.main import controller_command
from dreamlake.lakeshore.errors import Forbidden
from dreamlake.lakeshore.plane import HttpDispatch
from dreamlake.lakeshore.plane.dispatch import open_store
from dreamlake.lakeshore.plane.http import HttpFleet
from dreamlake.lakeshore.plane.leader import LeaseLeader
from dreamlake.lakeshore.providers.fake import FakeProvider
from tests.support.server import running_server

pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    home = tmp_path / "home"
    with running_server(home) as (url, token):
        yield url, token, home


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    """A server for the tests that tick nothing: a start saved per test."""
    home = tmp_path_factory.mktemp("fleet-home")
    with running_server(home) as (url, token):
        yield url, token, home


def _fleet(server: tuple[str, str, Path]) -> Iterator[HttpFleet]:
    url, token, _ = server
    fleet = HttpFleet(url, token=token)
    yield fleet
    fleet.close()


@pytest.fixture
def fleet(server: tuple[str, str, Path]) -> Iterator[HttpFleet]:
    yield from _fleet(server)


@pytest.fixture
def shared_fleet(shared: tuple[str, str, Path]) -> Iterator[HttpFleet]:
    yield from _fleet(shared)


def test_a_tick_over_http_launches_records_and_drains(
    server: tuple[str, str, Path], fleet: HttpFleet
) -> None:
    url, token, _ = server
    with HttpDispatch(url, token=token) as plane:
        plane.add_provider("sim", "fake", {})
        plane.create_queue("gpu", elasticity={"kind": "fixed", "max": 2, "provider": "sim"})
        fake = FakeProvider("sim")
        controller = Controller(fleet, Settings(), provider_factory=lambda _: fake)

        (decision,) = controller.tick()

        assert (decision.namespace, decision.target, decision.launch) == ("default", "queue/gpu", 2)
        assert fake.launched() == 2
        assert "scaled" in [e["kind"] for e in plane.events("gpu")]
        # What a scale-down does to a worker row, through the fleet route.
        plane.register_worker("w-1", queues=["gpu"])
        assert fleet.set_worker_state("default", "w-1", "draining").state == "draining"
        assert plane.worker("w-1").state == "draining"


def test_one_controller_leads_through_the_server(shared_fleet: HttpFleet) -> None:
    first = LeaseLeader(shared_fleet, "controller", ttl_s=30)
    second = LeaseLeader(shared_fleet, "controller", ttl_s=30)

    assert first.try_acquire() and first.try_acquire()  # taken, then renewed
    assert not second.try_acquire()
    first.close()
    assert second.try_acquire() and not first.try_acquire()
    second.close()


def test_the_fleet_routes_refuse_a_namespace_token(shared: tuple[str, str, Path]) -> None:
    url, _, home = shared
    store = open_store(home / "lakeshore.db")
    try:
        team = store.create_token("team")
    finally:
        store.close()
    fleet = HttpFleet(url, token=team)
    try:
        for call in (
            fleet.fleet_view,
            fleet.all_providers,
            lambda: fleet.set_worker_state("team", "w", "draining"),
            lambda: fleet.record_events([("team", "q", "scaled", {})], 0.0),
            lambda: fleet.acquire_leadership("controller", "me", 10.0),
        ):
            with pytest.raises(Forbidden, match="admin token"):
                call()
    finally:
        fleet.close()


def test_the_command_runs_one_tick_over_http(server: tuple[str, str, Path]) -> None:
    url, token, _ = server
    with HttpDispatch(url, token=token) as plane:
        plane.add_provider("sim", "fake", {})
        plane.create_queue("cpu", elasticity={"kind": "fixed", "max": 1, "provider": "sim"})

    result = CliRunner().invoke(controller_command, ["--url", url, "--token", token, "--once"])

    assert result.exit_code == 0, result.output
    assert "default queue/cpu: 0 -> 1" in result.output
