"""Named provider configs of a namespace (the record and its check are in ../providers.py)."""

from __future__ import annotations

import json
import time
from typing import Any

from dreamlake.lakeshore.errors import Conflict, NotFound
from dreamlake.lakeshore.plane.providers import ProviderInfo, check_provider, provider_info

from .namespaces import NamespaceStore


class ProviderStore(NamespaceStore):
    def add_provider(self, ns: str, name: str, kind: str, config: dict[str, Any]) -> ProviderInfo:
        """Store a named config; a name already used is a Conflict (remove it first)."""
        config = check_provider(name, kind, config)
        self.ensure_namespace(ns)
        now = time.time()
        with self.connector.transaction() as tx:
            created = tx.one(
                "provider_insert", ns=ns, name=name, kind=kind, config=json.dumps(config), now=now
            )
            if created is None:
                raise Conflict(f"provider '{name}' already exists in namespace '{ns}'")
        return self.provider(ns, name)

    def provider(self, ns: str, name: str) -> ProviderInfo:
        return self._named("provider_get", "provider", provider_info, ns, name=name)

    def providers(self, ns: str) -> list[ProviderInfo]:
        with self.connector.transaction(write=False) as tx:
            return [provider_info(r) for r in tx.all("provider_list", ns=ns)]

    def all_providers(self) -> list[ProviderInfo]:
        """Every namespace's configs: what the controller reads once per tick."""
        with self.connector.transaction(write=False) as tx:
            return [provider_info(r) for r in tx.all("provider_list_all")]

    def delete_provider(self, ns: str, name: str) -> None:
        with self.connector.transaction() as tx:
            if tx.one("provider_delete", ns=ns, name=name) is None:
                raise NotFound(f"unknown provider '{name}' in namespace '{ns}'")
