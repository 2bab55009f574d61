"""`ec2`: one VM per daemon through boto3, found again by its tags.

`run_instances` is called once per daemon (each VM's user-data names its daemon), with the
instance tags of `LaunchSpec.tags` so `list()` is a `describe_instances` filtered by tag. With
`spot: true` a launch asks for spot capacity and, when EC2 has none (capacity or price errors),
asks again on demand for the same VM: a job waits less for a dearer VM than for no VM.

Config: `region`, `instance_type`, `ami` (required); `spot`, `subnet_id`, `security_group_ids`,
`key_name`, `iam_instance_profile`, `package` (pip requirement for the VM), `concurrency`,
`labels`. A queue's `match` overrides any of these (say, `instance_type` per pool).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..extras import needs_extra
from .base import TAG_PROVIDER, Instance, LaunchSpec, ProviderError, matches
from .userdata import render

REQUIRED = ("region", "instance_type", "ami")
#: EC2 error codes that mean "no spot capacity (at that price) right now": fall back.
SPOT_CAPACITY_ERRORS = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "SpotMaxPriceTooLow",
        "MaxSpotInstanceCountExceeded",
        "UnfulfillableCapacity",
        "InsufficientFreeAddressesInSubnet",
    }
)
LIVE_STATES = ["pending", "running", "stopping", "stopped"]


def check_config(config: Mapping[str, Any]) -> None:
    missing = [k for k in REQUIRED if not config.get(k)]
    if missing:
        raise ProviderError(f"ec2 provider config needs {', '.join(missing)}")


class Ec2Provider:
    def __init__(self, name: str, config: Mapping[str, Any], *, client: Any = None) -> None:
        check_config(config)
        self.name = name
        self.config = dict(config)
        if client is None:
            with needs_extra("the ec2 provider", "ec2"):
                import boto3  # type: ignore[import-untyped]

            client = boto3.client("ec2", region_name=self.config["region"])
        self.client = client

    def launch(self, spec: LaunchSpec, count: int) -> list[Instance]:
        settings = {**self.config, **spec.settings}
        return [self._run_one(spec, daemon, settings) for daemon in spec.daemon_names(count)]

    def _run_one(self, spec: LaunchSpec, daemon: str, settings: dict[str, Any]) -> Instance:
        from botocore.exceptions import ClientError  # type: ignore[import-untyped]

        tags = spec.tags(daemon, self.name)
        params: dict[str, Any] = {
            "ImageId": settings["ami"],
            "InstanceType": settings["instance_type"],
            "MinCount": 1,
            "MaxCount": 1,
            "UserData": render(spec, daemon, settings),
            "TagSpecifications": [
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": k, "Value": v} for k, v in {**tags, "Name": daemon}.items()],
                }
            ],
        }
        for key, field in (
            ("subnet_id", "SubnetId"),
            ("key_name", "KeyName"),
            ("security_group_ids", "SecurityGroupIds"),
        ):
            if settings.get(key):
                params[field] = settings[key]
        if settings.get("iam_instance_profile"):
            params["IamInstanceProfile"] = {"Name": settings["iam_instance_profile"]}
        if settings.get("spot"):
            spot = {
                **params,
                "InstanceMarketOptions": {
                    "MarketType": "spot",
                    "SpotOptions": {
                        "SpotInstanceType": "one-time",
                        "InstanceInterruptionBehavior": "terminate",
                    },
                },
            }
            try:
                return self._instance(self.client.run_instances(**spot)["Instances"][0])
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") not in SPOT_CAPACITY_ERRORS:
                    raise ProviderError(f"ec2 spot launch of {daemon} failed: {exc}") from exc
            params["TagSpecifications"][0]["Tags"].append(
                {"Key": "lakeshore:spot-fallback", "Value": "on-demand"}
            )
        try:
            return self._instance(self.client.run_instances(**params)["Instances"][0])
        except ClientError as exc:
            raise ProviderError(f"ec2 launch of {daemon} failed: {exc}") from exc

    def terminate(self, ids: Sequence[str]) -> None:
        if ids:
            self.client.terminate_instances(InstanceIds=list(ids))

    def list(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
        wanted = {TAG_PROVIDER: self.name, **(tags or {})}
        filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in wanted.items()]
        filters.append({"Name": "instance-state-name", "Values": LIVE_STATES})
        out = []
        for page in self.client.get_paginator("describe_instances").paginate(Filters=filters):
            for reservation in page["Reservations"]:
                for raw in reservation["Instances"]:
                    inst = self._instance(raw)
                    if matches(inst.tags, wanted):
                        out.append(inst)
        return out

    @staticmethod
    def _instance(raw: Mapping[str, Any]) -> Instance:
        launched = raw.get("LaunchTime")
        state = raw.get("State", {}).get("Name", "pending")
        return Instance(
            id=raw["InstanceId"],
            tags={t["Key"]: t["Value"] for t in raw.get("Tags", [])},
            launched_at=launched.timestamp() if launched is not None else time.time(),
            state={"running": "running", "pending": "pending"}.get(state, "terminating"),
        )
