"""The ec2 provider against moto's EC2 (`mock_aws`, the one fake this project allows).

A spot capacity error is injected through botocore's own event hooks on top of moto, so the
fallback to on-demand is exercised on the real client code path.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

boto3 = pytest.importorskip("boto3")
moto = pytest.importorskip("moto")

from dreamlake.lakeshore.providers.base import LaunchSpec, ProviderError  # noqa: E402
from dreamlake.lakeshore.providers.ec2 import Ec2Provider  # noqa: E402
from dreamlake.lakeshore.providers.userdata import render  # noqa: E402
from tests.support.aws import mocked_ec2  # noqa: E402

REGION = "us-east-1"
CONFIG = {"region": REGION, "instance_type": "t3.micro", "ami": "ami-12345678"}


@pytest.fixture
def ec2(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with mocked_ec2(monkeypatch, REGION) as client:
        yield client


def spec(**kw: Any) -> LaunchSpec:
    base = dict(
        namespace="research",
        queues=("train", "eval"),
        name="train",
        target="pool/gpu",
        plane_url="https://plane.example:8765",
        plane_token="lks_secret",
    )
    return LaunchSpec(**{**base, **kw})  # type: ignore[arg-type]


def test_launch_tags_list_and_terminate(ec2: Any) -> None:
    p = Ec2Provider("my-ec2", CONFIG, client=ec2)
    launched = p.launch(spec(), 2)
    assert [i.daemon for i in launched] == ["train-00", "train-01"]

    found = p.list({"lakeshore:namespace": "research", "lakeshore:target": "pool/gpu"})
    assert sorted(i.id for i in found) == sorted(i.id for i in launched)
    tags = found[0].tags
    assert tags["lakeshore:queue"] == "train" and tags["lakeshore:provider"] == "my-ec2"
    assert tags["lakeshore:spec"] == spec().config_hash
    assert p.list({"lakeshore:namespace": "elsewhere"}) == []

    raw = ec2.describe_instances(InstanceIds=[launched[0].id])["Reservations"][0]["Instances"][0]
    assert raw["InstanceType"] == "t3.micro" and raw["ImageId"] == "ami-12345678"

    p.terminate([launched[0].id])
    assert [i.id for i in p.list()] == [launched[1].id]


def test_match_overrides_the_instance_type(ec2: Any) -> None:
    p = Ec2Provider("my-ec2", CONFIG, client=ec2)
    [inst] = p.launch(spec(settings={"instance_type": "g5.xlarge"}), 1)
    raw = ec2.describe_instances(InstanceIds=[inst.id])["Reservations"][0]["Instances"][0]
    assert raw["InstanceType"] == "g5.xlarge"


def test_spot_is_asked_first(ec2: Any) -> None:
    seen: list[dict[str, Any]] = []
    ec2.meta.events.register("provide-client-params.ec2.RunInstances", _record(seen))
    Ec2Provider("my-ec2", {**CONFIG, "spot": True}, client=ec2).launch(spec(), 1)
    assert seen[0]["InstanceMarketOptions"]["MarketType"] == "spot"


def test_spot_without_capacity_falls_back_to_on_demand(ec2: Any) -> None:
    seen: list[dict[str, Any]] = []
    ec2.meta.events.register("provide-client-params.ec2.RunInstances", _record(seen))
    ec2.meta.events.register("before-call.ec2.RunInstances", _no_spot_capacity)
    p = Ec2Provider("my-ec2", {**CONFIG, "spot": True}, client=ec2)
    [inst] = p.launch(spec(), 1)
    assert ["InstanceMarketOptions" in s for s in seen] == [True, False]
    assert inst.tags["lakeshore:spot-fallback"] == "on-demand"


def test_other_errors_are_not_retried_on_demand(ec2: Any) -> None:
    ec2.meta.events.register("before-call.ec2.RunInstances", _unauthorized)
    with pytest.raises(ProviderError, match="UnauthorizedOperation"):
        Ec2Provider("my-ec2", {**CONFIG, "spot": True}, client=ec2).launch(spec(), 1)


def test_config_needs_region_type_and_image() -> None:
    with pytest.raises(ProviderError, match="needs instance_type, ami"):
        Ec2Provider("x", {"region": REGION}, client=object())


def test_user_data_installs_and_starts_the_named_daemon(ec2: Any) -> None:
    p = Ec2Provider("my-ec2", {**CONFIG, "concurrency": 4, "labels": {"gpu": "a10"}}, client=ec2)
    [inst] = p.launch(spec(), 1)
    attr = ec2.describe_instance_attribute(InstanceId=inst.id, Attribute="userData")
    import base64

    text = base64.b64decode(attr["UserData"]["Value"]).decode()
    assert text == render(
        spec(), "train-00", {**CONFIG, "concurrency": 4, "labels": {"gpu": "a10"}}
    )
    assert text.startswith("#!/bin/bash")
    assert "pip install --quiet 'dreamlake-lakeshore[daemon]==" in text
    assert "LAKESHORE_URL=https://plane.example:8765" in text
    assert "LAKESHORE_TOKEN=lks_secret" in text
    assert "LAKESHORE_DAEMON_NAME=train-00" in text
    assert "LAKESHORE_DAEMON_QUEUE='train eval'" in text
    assert "LAKESHORE_DAEMON_CONCURRENCY=4" in text
    assert "LAKESHORE_DAEMON_LABEL=gpu=a10" in text
    assert "systemctl enable --now lakeshore-daemon@train-00" in text
    assert "--queue %i" not in text  # queue and name come from the env file


def _record(seen: list[dict[str, Any]]) -> Any:
    def hook(params: dict[str, Any], **_: Any) -> None:
        seen.append(dict(params))

    return hook


def _error(code: str) -> Any:
    def hook(params: dict[str, Any], **_: Any) -> Any:
        spot = "InstanceMarketOptions" in str(params.get("body"))  # the serialised request
        if code == "InsufficientInstanceCapacity" and not spot:
            return None  # on-demand goes through to moto
        body = {"Error": {"Code": code, "Message": f"injected {code}"}}
        from botocore.awsrequest import AWSResponse

        return (AWSResponse("https://ec2.amazonaws.com/", 400, {}, None), body)

    return hook


_no_spot_capacity = _error("InsufficientInstanceCapacity")
_unauthorized = _error("UnauthorizedOperation")


def test_an_instance_ended_without_being_asked_is_listed_as_reclaimed(ec2: Any) -> None:
    p = Ec2Provider("my-ec2", {**CONFIG, "spot": True}, client=ec2)
    taken, stopped, ours = p.launch(spec(), 3)

    ec2.terminate_instances(InstanceIds=[taken.id])  # not through the provider: EC2 took it
    ec2.stop_instances(InstanceIds=[stopped.id])
    p.terminate([ours.id])

    found = {i.id: i for i in p.list()}
    assert ours.id not in found  # ended as asked: gone from the listing
    assert found[taken.id].state == "reclaimed"
    assert found[taken.id].reason.startswith("terminated: ")
    assert found[stopped.id].state == "reclaimed"
    assert found[stopped.id].reason.startswith("stopped: ")

    p.terminate([stopped.id])  # what the controller does with a reclaimed VM
    assert stopped.id not in {i.id for i in p.list() if i.state == "reclaimed"}


def test_an_on_demand_launch_skips_spot_and_says_why(ec2: Any) -> None:
    seen: list[dict[str, Any]] = []
    ec2.meta.events.register("provide-client-params.ec2.RunInstances", _record(seen))
    p = Ec2Provider("my-ec2", {**CONFIG, "spot": True}, client=ec2)
    [inst] = p.launch(spec(on_demand=True), 1)
    assert ["InstanceMarketOptions" in s for s in seen] == [False]
    assert inst.tags["lakeshore:spot-fallback"] == "reclaims"
    assert spec(on_demand=True).config_hash == spec().config_hash  # not rolled as outdated


@pytest.mark.parametrize("bad", [0, -1, 1.5, "3", True])
def test_spot_fallback_after_must_be_a_count(bad: object) -> None:
    with pytest.raises(ProviderError, match="spot_fallback_after must be a whole number"):
        Ec2Provider("x", {**CONFIG, "spot": True, "spot_fallback_after": bad}, client=object())


# -- launch shapes (issue 34, item 5) -----------------------------------------------------------


def test_the_instance_type_sets_the_shape_from_describe_instance_types(ec2: Any) -> None:
    p = Ec2Provider("gpu", {**CONFIG, "instance_type": "p4de.24xlarge"}, client=ec2)
    shape = p.launch_shape(p.config)
    assert shape is not None
    assert (shape.gpus, shape.gpu_type, shape.gpu_memory_gb, shape.cpus) == (8, "A100", 80, 96)
    assert "describe_instance_types" in shape.source
    # the config overrides it key by key; a CPU type has no shape
    held = p.launch_shape({**p.config, "shape": {"gpus": 4, "gpu_type": "A100-SXM4-80GB"}})
    assert held is not None and (held.gpus, held.gpu_type, held.gpu_memory_gb) == (
        4,
        "A100-SXM4-80GB",
        80,
    )
    assert p.launch_shape({**p.config, "instance_type": "t3.micro"}) is None


def test_the_table_answers_when_ec2_does_not(ec2: Any) -> None:
    from botocore.exceptions import ClientError

    def refuse(**_: Any) -> None:
        error = {"Error": {"Code": "UnauthorizedOperation", "Message": "not allowed"}}
        raise ClientError(error, "DescribeInstanceTypes")

    ec2.meta.events.register("before-call.ec2.DescribeInstanceTypes", refuse)
    p = Ec2Provider("gpu", {**CONFIG, "instance_type": "p5en.48xlarge"}, client=ec2)
    shape = p.launch_shape(p.config)
    assert shape is not None and (shape.gpus, shape.gpu_type, shape.source) == (
        8,
        "H200",
        "instance type p5en.48xlarge",
    )


def test_the_controller_packs_demand_into_the_right_count_of_run_instances(ec2: Any) -> None:
    from dreamlake.lakeshore.controller.loop import Controller, Settings
    from dreamlake.lakeshore.plane import Dispatch
    from dreamlake.lakeshore.types import SubmitRequest

    calls: list[str] = []
    ec2.meta.events.register(
        "provide-client-params.ec2.RunInstances",
        lambda params, **_: calls.append(params["InstanceType"]),
    )
    config = {**CONFIG, "instance_type": "p4d.24xlarge"}
    with Dispatch(":memory:") as d:
        d.store.add_provider("default", "p4d", "ec2", config)
        d.create_queue("train", elasticity={"kind": "elastic", "max": 8, "provider": "p4d"})
        # 4 x 4 GPUs + 8 x 1 GPU + 2 x 0.5 GPU = 25 GPUs on 8-GPU boxes: 4 VMs (not 14)
        reqs = [SubmitRequest(payload=b"x", resources={"gpus": 4}) for _ in range(4)]
        reqs += [SubmitRequest(payload=b"x", resources={"gpus": 1}) for _ in range(8)]
        reqs += [SubmitRequest(payload=b"x", resources={"gpus": 0.5}) for _ in range(2)]
        # and jobs no p4d could run (80 GB GPUs; 16 GPUs) launch nothing
        reqs += [SubmitRequest(payload=b"x", resources={"gpus": 1, "gpu_memory_gb": 80})]
        reqs += [SubmitRequest(payload=b"x", resources={"gpus": 16})]
        d.submit("train", reqs)
        controller = Controller(
            d.store,
            Settings(plane_url="https://plane.example"),
            provider_factory=lambda info: Ec2Provider(info.name, info.config, client=ec2),
        )
        [decision] = controller.tick()
    assert (decision.desired, decision.launch) == (4, 4)
    assert calls == ["p4d.24xlarge"] * 4
    assert "14 job(s) asking 25 GPU(s) packed onto 8 x A100 (40 GB)" in decision.reason
    assert "2 job(s) no such daemon could run left out" in decision.reason
