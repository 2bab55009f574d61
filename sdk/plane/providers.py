"""Named provider configs: where the controller and `lakeshore daemon launch` start daemons.

A namespace stores `my-ec2 = {kind: ec2, region: ..., instance_type: ...}` once; queue policies
and the CLI then name it. The plane keeps the config as an opaque JSON object of plain values and
checks only its shape: the provider plugin (`lakeshore.providers` entry points) checks its own
fields when it is built, since only it knows them and the server need not have it installed.
Credentials do not belong here (EC2 reads the usual AWS environment or instance role).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import Conflict, InvalidArgument, NotFound
from ..types import check_name

if TYPE_CHECKING:  # HttpDispatch imports ProviderInfo and nothing of the store
    from .store import SqlStore

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
    if len(text) > MAX_CONFIG_BYTES:
        raise InvalidArgument(f"provider config above {MAX_CONFIG_BYTES} bytes")
    return config


def add_provider(
    store: SqlStore, ns: str, name: str, kind: str, config: dict[str, Any]
) -> ProviderInfo:
    """Store a named config; a name already used is a Conflict (remove it first)."""
    config = check_provider(name, kind, config)
    store.ensure_namespace(ns)
    now = time.time()
    with store.connector.transaction() as tx:
        created = tx.one(
            "provider_insert", ns=ns, name=name, kind=kind, config=json.dumps(config), now=now
        )
        if created is None:
            raise Conflict(f"provider '{name}' already exists in namespace '{ns}'")
    return get_provider(store, ns, name)


def get_provider(store: SqlStore, ns: str, name: str) -> ProviderInfo:
    with store.connector.transaction(write=False) as tx:
        row = tx.one("provider_get", ns=ns, name=name)
    if row is None:
        raise NotFound(f"unknown provider '{name}' in namespace '{ns}'")
    return _info(row)


def list_providers(store: SqlStore, ns: str) -> list[ProviderInfo]:
    with store.connector.transaction(write=False) as tx:
        return [_info(r) for r in tx.all("provider_list", ns=ns)]


def all_providers(store: SqlStore) -> list[ProviderInfo]:
    """Every namespace's configs: what the controller reads once per tick."""
    with store.connector.transaction(write=False) as tx:
        return [_info(r) for r in tx.all("provider_list_all")]


def delete_provider(store: SqlStore, ns: str, name: str) -> None:
    with store.connector.transaction() as tx:
        if tx.one("provider_delete", ns=ns, name=name) is None:
            raise NotFound(f"unknown provider '{name}' in namespace '{ns}'")


def _info(row: dict[str, Any]) -> ProviderInfo:
    return ProviderInfo(
        namespace=row["namespace"],
        name=row["name"],
        kind=row["kind"],
        config=json.loads(row["config"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )
