"""Provider configs in the namespace, elasticity validation on write, and the steal delay."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from dreamlake.lakeshore.errors import Conflict, InvalidArgument, NotFound
from dreamlake.lakeshore.plane import Dispatch
from dreamlake.lakeshore.providers import registry
from dreamlake.lakeshore.providers.base import LaunchSpec, ProviderError, merged_settings
from dreamlake.lakeshore.providers.fake import FakeProvider
from dreamlake.lakeshore.types import SubmitRequest
from tests.support import claiming


@pytest.fixture
def d() -> Iterator[Dispatch]:
    plane = Dispatch(":memory:")
    yield plane
    plane.close()


def test_provider_configs_add_list_show_remove(d: Dispatch) -> None:
    info = d.add_provider("my-ec2", "ec2", {"region": "us-east-1", "spot": True})
    assert (info.name, info.kind, info.config["spot"]) == ("my-ec2", "ec2", True)
    assert [p.name for p in d.providers()] == ["my-ec2"]
    assert d.provider("my-ec2").config == {"region": "us-east-1", "spot": True}
    with pytest.raises(Conflict, match="already exists"):
        d.add_provider("my-ec2", "ec2", {})
    d.delete_provider("my-ec2")
    with pytest.raises(NotFound, match="unknown provider 'my-ec2'"):
        d.provider("my-ec2")


@pytest.mark.parametrize(
    ("name", "kind", "config", "error"),
    [
        ("Bad_Name", "local", {}, "invalid provider name"),
        ("ok", "", {}, "invalid provider kind"),
        ("ok", "local", [1], "must be an object"),
        ("ok", "local", {"x": object()}, "plain JSON"),
    ],
)
def test_provider_config_shape_is_checked(
    d: Dispatch, name: str, kind: str, config: object, error: str
) -> None:
    with pytest.raises(InvalidArgument, match=error):
        d.add_provider(name, kind, config)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("elasticity", "error"),
    [
        (
            {"kind": "elastic", "max": 2, "target_per_worker": 0},
            "target_per_worker must be above 0",
        ),
        ({"kind": "fully_elastic", "max": 2, "min": 1}, "takes no 'min'"),
        ({"kind": "fixed", "max": 2.5}, "whole number"),
        ({"kind": "fixed", "max": 2, "idle": 3}, "unknown elasticity field"),
        ({"kind": "fixed", "max": 2, "pool": "Not OK"}, "invalid elasticity.pool name"),
        ({"kind": "fixed", "max": 2, "match": "big"}, "match must be an object"),
        ({"kind": "none", "pool": "p"}, "cannot join a pool"),
        ({"kind": "elastic"}, "needs 'max'"),
        ({"kind": "elastic", "max": 1, "steal_delay_s": -1}, "non-negative"),
    ],
)
def test_elasticity_is_validated_on_write(d: Dispatch, elasticity: dict, error: str) -> None:
    with pytest.raises(InvalidArgument, match=error):
        d.create_queue("q", elasticity=elasticity)


def test_a_full_policy_is_accepted_and_patchable(d: Dispatch) -> None:
    full = {
        "kind": "fully_elastic",
        "max": 8,
        "idle_s": 30,
        "target_per_worker": 2,
        "provider": "my-ec2",
        "pool": "mixed",
        "match": {"instance_type": "g5.xlarge", "labels": {"gpu": "a10"}},
        "steal_delay_s": 5,
        "cost_weight": 2.5,
    }
    assert d.create_queue("q", elasticity=full).elasticity == full
    assert d.patch_queue("q", {"elasticity": {"idle_s": 60}}).elasticity["idle_s"] == 60
    with pytest.raises(InvalidArgument, match="whole number"):
        d.patch_queue("q", {"elasticity": {"max": 1.5}})


def test_a_worker_steals_from_a_non_primary_queue_only_after_the_delay(d: Dispatch) -> None:
    pool = {"kind": "fully_elastic", "max": 2, "pool": "p"}
    d.create_queue("mine", elasticity=pool)
    d.create_queue("theirs", elasticity={**pool, "steal_delay_s": 0.2})
    d.submit("theirs", [SubmitRequest(payload=b"t")])

    assert claiming.claim(d, ["mine", "theirs"], worker="w") is None  # too fresh to steal
    # its own workers (primary first) take it at once
    own = claiming.claim(d, ["theirs", "mine"], worker="own")
    assert own is not None and own.queue == "theirs"
    d.release(own.id, own.lease)

    deadline = time.monotonic() + 5
    stolen = None
    while stolen is None and time.monotonic() < deadline:
        stolen = claiming.claim(d, ["mine", "theirs"], worker="w", wait_s=0.05)
    assert stolen is not None and stolen.queue == "theirs"


def test_the_primary_queue_is_served_before_aged_work_elsewhere(d: Dispatch) -> None:
    d.create_queue("mine", elasticity={"kind": "fixed", "max": 1})
    d.create_queue("theirs", elasticity={"kind": "fixed", "max": 1, "steal_delay_s": 0.01})
    d.submit("theirs", [SubmitRequest(payload=b"t")])
    time.sleep(0.02)  # age the job past the delay (the delay itself is what is tested)
    d.submit("mine", [SubmitRequest(payload=b"m")])
    first = claiming.claim(d, ["mine", "theirs"], worker="w")
    assert first is not None and first.queue == "mine"


def test_registry_finds_the_shipped_plugins() -> None:
    assert {"local", "ec2", "fake"} <= set(registry.kinds())
    assert isinstance(registry.build("fake", "x", {}), FakeProvider)
    with pytest.raises(ProviderError, match="unknown provider kind 'warp'"):
        registry.build("warp", "x", {})


def test_launch_spec_names_tags_and_hash() -> None:
    spec = LaunchSpec(namespace="ns", queues=("a", "b"), name="train", target="cli/train")
    assert spec.daemon_names(3) == ["train-00", "train-01", "train-02"]
    tags = spec.tags("train-01", "my-ec2")
    assert tags["lakeshore:daemon"] == "train-01" and tags["lakeshore:queue"] == "a"
    other = LaunchSpec(namespace="ns", queues=("a",), name="train", target="cli/train")
    assert spec.config_hash != other.config_hash
    assert merged_settings(
        {"instance_type": "s", "labels": {"a": "1"}}, {"labels": {"b": "2"}}
    ) == {
        "instance_type": "s",
        "labels": {"a": "1", "b": "2"},
    }
