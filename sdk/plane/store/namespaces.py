"""Namespaces and their orgs."""

from __future__ import annotations

import time

from dreamlake.lakeshore.errors import NotFound
from dreamlake.lakeshore.plane.connector import Row
from dreamlake.lakeshore.types import check_name

from .base import StoreBase


class NamespaceStore(StoreBase):
    """Namespaces and their orgs."""

    def ensure_namespace(self, ns: str, org: str | None = None) -> None:
        check_name(ns, "namespace")
        with self.connector.transaction() as tx:
            tx.all("ensure_namespace", ns=ns, org=org, now=time.time())

    def namespace(self, ns: str) -> Row | None:
        with self.connector.transaction(write=False) as tx:
            return tx.one("get_namespace", ns=ns)

    def org_namespaces(self, ns: str) -> list[str]:
        with self.connector.transaction(write=False) as tx:
            row = tx.one("get_namespace", ns=ns)
            if row is None:
                raise NotFound(f"unknown namespace '{ns}'")
            return [r["name"] for r in tx.all("org_namespaces", ns=ns, org=row["org"])]
