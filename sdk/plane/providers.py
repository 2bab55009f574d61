"""Named provider configs: where the controller and `lakeshore daemon launch` start daemons.

A namespace stores `my-ec2 = {kind: ec2, region: ..., instance_type: ...}` once; queue policies
and the CLI then name it. The plane keeps the config as an opaque JSON object of plain values and
checks only its shape: the provider plugin (`lakeshore.providers` entry points) checks its own
fields when it is built, since only it knows them and the server need not have it installed.
Credentials do not belong here (EC2 reads the usual AWS environment or instance role).

This module is the record and its check (HttpDispatch needs them without the store); the rows
are written and read by `SqlStore` (store/providers.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.shapes import check_shape
from dreamlake.lakeshore.types import check_name, unsendable

#: A config is small: a few settings, not a payload.
MAX_CONFIG_BYTES = 16_384


@dataclass(frozen=True)
class ProviderInfo:
    namespace: str
    name: str
    kind: str
    config: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float = 0.0


def check_provider(name: object, kind: object, config: object) -> dict[str, Any]:
    check_name(name, "provider")
    check_name(kind, "provider kind")
    if not isinstance(config, dict) or not all(isinstance(k, str) for k in config):
        raise InvalidArgument("provider config must be an object with string keys")
    try:
        text = json.dumps(config)
    except (TypeError, ValueError):
        raise InvalidArgument("provider config must hold plain JSON values") from None
    bad = unsendable(config, "config")
    if bad is not None:
        raise InvalidArgument(f"provider {bad[0]} {bad[1]}")
    if len(text) > MAX_CONFIG_BYTES:
        raise InvalidArgument(f"provider config above {MAX_CONFIG_BYTES} bytes")
    if "shape" in config:  # what each launch has (sdk/shapes.py): the controller sizes on it
        config = {**config, "shape": check_shape(config["shape"], "provider config shape")}
    return config


def provider_info(row: dict[str, Any]) -> ProviderInfo:
    return ProviderInfo(
        namespace=row["namespace"],
        name=row["name"],
        kind=row["kind"],
        config=json.loads(row["config"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )
