"""One contract for every provider that starts real daemons: `local` and `slurm` (real Slurm).

What the controller relies on (providers/base.py): `launch` starts daemons that register under
the names and queues of the spec; `list` finds them again by their tags, from a fresh provider
object as well (a restarted controller); `terminate` ends one and leaves the others; ids it no
longer knows are ignored.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import JOBS_PATH, wait_until

from dreamlake.lakeshore.plane import Dispatch
from dreamlake.lakeshore.providers.base import (
    TAG_NAMESPACE,
    TAG_PROVIDER,
    TAG_SPEC,
    TAG_TARGET,
    LaunchSpec,
    Provider,
)
from dreamlake.lakeshore.providers.local import LocalProvider
from dreamlake.lakeshore.providers.slurm import SlurmProvider
from tests.support.slurm import provider_name, require_slurm

pytestmark = pytest.mark.slow

#: A provider kind: its name, the provider object, a factory for more objects over its
#: config (a restarted controller's), an id it never launched.
Kind = tuple[str, Provider, Callable[[], Provider], str]


@contextmanager
def local_kind(home: Path) -> Iterator[Kind]:
    config = {"state_dir": str(home / "local"), "env": {"PYTHONPATH": JOBS_PATH}}
    provider = LocalProvider("here", config)
    try:
        yield "here", provider, lambda: LocalProvider("here", config), "local-nobody-000000"
    finally:  # through the same object, which reaps the processes it started
        provider.kill_after_s = 0
        for inst in provider.list():
            provider.terminate([inst.id])
            provider.terminate([inst.id])  # the second is SIGKILL
        wait_until(lambda: not provider.list(), timeout=30, what="the local daemons to exit")


@contextmanager
def slurm_kind(home: Path) -> Iterator[Kind]:
    require_slurm()
    with provider_name() as name:
        config: dict[str, Any] = {
            "state_dir": str(home / "slurm"),
            "command": [sys.executable, "-m", "dreamlake.lakeshore.daemon"],
            "env": {"PYTHONPATH": JOBS_PATH},
            "cpus_per_task": 1,
            "mem": 256,
            "time": 10,
        }
        yield name, SlurmProvider(name, config), lambda: SlurmProvider(name, config), "999999999"


KINDS = {"local": local_kind, "slurm": slurm_kind}


@pytest.fixture(params=sorted(KINDS))
def kind(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Kind]:
    with KINDS[request.param](tmp_path) as k:
        yield k


def test_the_provider_contract(kind: Kind, tmp_path: Path) -> None:
    name, provider, make, bogus = kind
    with Dispatch(tmp_path / "lakeshore.db") as plane:
        spec = LaunchSpec(
            namespace="default",
            queues=("work", "spare"),
            name="pool",
            target="pool/contract",
            plane_url=str(tmp_path / "lakeshore.db"),
        )

        # launch: instances tagged with the spec and the provider
        launched = provider.launch(spec, 2)
        assert [i.daemon for i in launched] == ["pool-00", "pool-01"]
        assert all(i.tags[TAG_PROVIDER] == name for i in launched)
        assert all(i.tags[TAG_SPEC] == spec.config_hash for i in launched)

        # list: by tags, from this object and from a fresh one (a restarted controller)
        ids = sorted(i.id for i in launched)
        assert sorted(i.id for i in provider.list({TAG_TARGET: "pool/contract"})) == ids
        assert sorted(i.id for i in make().list({TAG_NAMESPACE: "default"})) == ids
        assert provider.list({TAG_NAMESPACE: "elsewhere"}) == []

        # the daemons register under their names, with the spec's queues, primary first
        rows = wait_until(
            lambda: len(plane.workers()) == 2 and plane.workers(),
            timeout=60,
            what="both daemons registered",
        )
        assert sorted(w.name for w in rows) == ["pool-00", "pool-01"]
        assert all(w.queues == ["work", "spare"] for w in rows)

        # terminate one: it ends (its daemon leaves), the other stays; unknown ids are ignored
        first = plane.worker("pool-00")
        provider.terminate([launched[0].id, bogus])
        wait_until(
            lambda: [i.id for i in provider.list()] == [launched[1].id],
            timeout=60,
            what="the terminated instance to end",
        )
        assert plane.worker(first.id).state == "gone"
        assert [(w.name, w.state) for w in plane.workers()] == [("pool-01", "alive")]


def test_slurm_lists_the_same_jobs_through_squeue_format_as_through_json(tmp_path: Path) -> None:
    with slurm_kind(tmp_path) as (_, provider, make, _):
        spec = LaunchSpec(
            namespace="default",
            queues=("work",),
            name="held",
            target="queue/work",
            settings={"sbatch_args": ["--hold"]},  # pending, never run: nothing to wait for
        )
        [launched] = provider.launch(spec, 1)
        old_client = make()
        assert isinstance(old_client, SlurmProvider)
        old_client._json = False  # as on a squeue without --json

        [by_json] = provider.list()
        [by_format] = old_client.list()

        assert by_json.id == by_format.id == launched.id
        assert by_json.tags == by_format.tags == launched.tags
        assert by_json.state == by_format.state == "pending"
        assert by_json.note == by_format.note != ""
        assert abs(by_json.launched_at - by_format.launched_at) < 1


def test_a_slurm_daemon_inherits_none_of_the_controllers_lakeshore_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKESHORE_CONTROLLER_TOKEN", "the-controllers-admin-token")
    monkeypatch.setenv("LAKESHORE_URL", "http://somewhere-else:8765")
    with slurm_kind(tmp_path) as (_, provider, _, _), Dispatch(tmp_path / "lakeshore.db") as plane:
        spec = LaunchSpec(
            namespace="default",
            queues=("work",),
            name="env",
            target="queue/work",
            plane_url=str(tmp_path / "lakeshore.db"),
        )
        provider.launch(spec, 1)
        [row] = wait_until(plane.workers, timeout=60, what="the daemon registered")

        assert row.pid is not None
        environ = Path(f"/proc/{row.pid}/environ").read_bytes().split(b"\0")
        names = {item.partition(b"=")[0].decode() for item in environ if item}
        assert "LAKESHORE_CONTROLLER_TOKEN" not in names and "LAKESHORE_URL" not in names
        assert f"LAKESHORE_HOME={tmp_path}".encode() in environ
        assert "SLURM_JOB_ID" in names  # it is the Slurm job's process
