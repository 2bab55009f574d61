"""One table for a benchmark run: rows of (what, rate or latency, ratio to a peer)."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.table import Table


@dataclass
class Row:
    group: str
    system: str
    value: float
    unit: str  # "ops/s" (higher is better) or "ms" (lower is better)
    note: str = ""


def ratio(row: Row, peer: Row) -> float:
    """How many times better `row` is than `peer` (>1 means ahead)."""
    if row.unit == "ms":
        return peer.value / row.value if row.value else float("inf")
    return row.value / peer.value if peer.value else float("inf")


def render(title: str, rows: list[Row], baselines: dict[str, str]) -> None:
    """Print rows grouped, each with its ratio against the group's named baseline system."""
    table = Table(title=title)
    for col in ("benchmark", "system", "value", "vs baseline", "note"):
        table.add_column(col)
    for group in dict.fromkeys(r.group for r in rows):
        members = [r for r in rows if r.group == group]
        base = next((r for r in members if r.system == baselines.get(group)), None)
        for r in members:
            rel = f"{ratio(r, base):.2f}x {base.system}" if base and r is not base else "-"
            table.add_row(group, r.system, f"{r.value:,.1f} {r.unit}", rel, r.note)
    Console().print(table)
