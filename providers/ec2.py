"""`ec2`: one VM per daemon through boto3, found again by its tags.

`run_instances` is called once per daemon (each VM's user-data names its daemon), with the
instance tags of `LaunchSpec.tags` so `list()` is a `describe_instances` filtered by tag. With
`spot: true` a launch asks for spot capacity and, when EC2 has none (capacity or price errors),
asks again on demand for the same VM: a job waits less for a dearer VM than for no VM.

An instance that ended or stopped without this provider being asked to end it (a spot
interruption, a host failure, a hand in the console) is listed as `reclaimed`, with EC2's state
reason, for as long as EC2 still describes it (about an hour after it ended): `terminate()` tags
an instance `lakeshore:ended-by` before ending it, so the two are told apart after a restart too.

Config: `region`, `instance_type`, `ami` (required); `spot`, `subnet_id`, `security_group_ids`,
`key_name`, `iam_instance_profile`, `package` (pip requirement for the VM), `concurrency`,
`labels`, `spot_fallback_after` (the controller launches on-demand once this many of a pool's
instances were reclaimed within an hour), `shape` (what each VM offers, over what the instance
type says: `launch_shape`). A queue's `match` overrides any of these (say, `instance_type` per
pool).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

from dreamlake.lakeshore.extras import needs_extra
from dreamlake.lakeshore.shapes import Shape, ec2_shape, overridden, with_defaults

from .base import TAG_ENDED_BY, TAG_PROVIDER, Instance, LaunchSpec, ProviderError, matches
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
LISTED_STATES = ["pending", "running", "stopping", "stopped", "shutting-down", "terminated"]
ENDING_STATES = frozenset({"stopping", "stopped", "shutting-down", "terminated"})


def check_config(config: Mapping[str, Any]) -> None:
    """The settings this plugin reads: refused here (and by `lakeshore providers add`) with
    what is allowed, rather than when the controller first launches."""
    missing = [k for k in REQUIRED if not config.get(k)]
    if missing:
        raise ProviderError(f"ec2 provider config needs {', '.join(missing)}")
    after = config.get("spot_fallback_after")
    if after is not None and (isinstance(after, bool) or not isinstance(after, int) or after < 1):
        raise ProviderError(
            f"spot_fallback_after must be a whole number of reclaims, 1 or more; got {after!r}"
        )
    if "spot" in config and not isinstance(config["spot"], bool):
        raise ProviderError(f"spot must be true or false; got {config['spot']!r}")


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
        #: instance type -> its shape as EC2 describes it (None: no GPU, or EC2 would not say)
        self._described: dict[str, Shape | None] = {}

    def launch_shape(self, settings: Mapping[str, Any]) -> Shape | None:
        """What each VM of `settings` offers: EC2's `describe_instance_types` GpuInfo for the
        instance type (asked once per type), else the table of common GPU types; the config's
        `shape` overrides either key by key."""
        instance_type = str(settings.get("instance_type") or self.config["instance_type"])
        if instance_type not in self._described:
            self._described[instance_type] = self._describe(instance_type)
        base = self._described[instance_type] or ec2_shape(instance_type)
        return with_defaults(overridden(base, settings), settings)

    def _describe(self, instance_type: str) -> Shape | None:
        from botocore.exceptions import BotoCoreError, ClientError  # type: ignore[import-untyped]

        try:
            found = self.client.describe_instance_types(InstanceTypes=[instance_type])
        except (BotoCoreError, ClientError):
            return None  # not allowed to ask, or a type EC2 does not know: the table says
        for raw in found.get("InstanceTypes", []):
            gpus = [g for g in raw.get("GpuInfo", {}).get("Gpus", []) if g.get("Count")]
            if not gpus:
                return None
            gpu = gpus[0]
            memory_mib = gpu.get("MemoryInfo", {}).get("SizeInMiB")
            return Shape(
                gpus=sum(int(g["Count"]) for g in gpus),
                gpu_type=str(gpu.get("Name") or "GPU"),
                gpu_memory_gb=round(memory_mib / 1024, 1) if memory_mib else None,
                cpus=float(raw["VCpuInfo"]["DefaultVCpus"]) if "VCpuInfo" in raw else None,
                memory_gb=(raw["MemoryInfo"]["SizeInMiB"] / 1024 if "MemoryInfo" in raw else None),
                source=f"instance type {instance_type} (EC2 describe_instance_types)",
            )
        return None

    def launch(self, spec: LaunchSpec, count: int) -> list[Instance]:
        settings = {**self.config, **spec.settings}
        return [self._run_one(spec, daemon, settings) for daemon in spec.daemon_names(count)]

    def _run_one(self, spec: LaunchSpec, daemon: str, settings: dict[str, Any]) -> Instance:
        from botocore.exceptions import ClientError

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
        if settings.get("spot") and spec.on_demand:
            params["TagSpecifications"][0]["Tags"].append(
                {"Key": "lakeshore:spot-fallback", "Value": "reclaims"}
            )
        elif settings.get("spot"):
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
        if not ids:
            return
        from botocore.exceptions import ClientError

        # Marks the end as asked for; a failed tag only risks one false "reclaimed".
        with contextlib.suppress(ClientError):
            self.client.create_tags(
                Resources=list(ids), Tags=[{"Key": TAG_ENDED_BY, "Value": "lakeshore"}]
            )
        self.client.terminate_instances(InstanceIds=list(ids))

    def list(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
        wanted = {TAG_PROVIDER: self.name, **(tags or {})}
        filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in wanted.items()]
        filters.append({"Name": "instance-state-name", "Values": LISTED_STATES})
        out = []
        for page in self.client.get_paginator("describe_instances").paginate(Filters=filters):
            for reservation in page["Reservations"]:
                for raw in reservation["Instances"]:
                    inst = self._instance(raw)
                    if inst.state != "ended" and matches(inst.tags, wanted):
                        out.append(inst)
        return out

    @staticmethod
    def _instance(raw: Mapping[str, Any]) -> Instance:
        """The instance as the controller sees it (`ended`: ended as it was asked to)."""
        launched = raw.get("LaunchTime")
        state = raw.get("State", {}).get("Name", "pending")
        tags = {t["Key"]: t["Value"] for t in raw.get("Tags", [])}
        reason = ""
        if state in ("running", "pending"):
            seen = state
        elif TAG_ENDED_BY in tags:
            seen = "ended" if state == "terminated" else "terminating"
        elif state in ENDING_STATES:
            seen = "reclaimed"
            why = raw.get("StateReason", {}).get("Code") or raw.get("StateTransitionReason")
            reason = f"{state}: {why or 'no reason given'}"
        else:
            seen = "terminating"
        return Instance(
            id=raw["InstanceId"],
            tags=tags,
            launched_at=launched.timestamp() if launched is not None else time.time(),
            state=seen,
            reason=reason,
        )
