"""The shipped Grafana dashboard and Prometheus alert rules (server/grafana/).

Both are text nobody runs until an outage, so a renamed metric would leave a blank panel or an
alert that can never fire. Every metric name their expressions use must be one that the
server's, a daemon's or the controller's registry exposes; the rules must have the shape
Prometheus loads (promtool checks them too when it is on PATH).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from dreamlake.lakeshore.controller.metrics import ControllerMetrics
from dreamlake.lakeshore.daemon.metrics import DaemonMetrics
from dreamlake.lakeshore.plane import Dispatch
from dreamlake.lakeshore.server.metrics import ServerMetrics

ASSETS = resources.files("dreamlake.lakeshore.server") / "grafana"
#: Series Prometheus itself makes for every scrape target.
BUILTIN = {"up"}
METRIC = re.compile(r"\b(lakeshore_[a-z0-9_]+)\b")
DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("_count", "_sum", "_created"),
    "info": ("_info",),
}


def sample_names(registry: CollectorRegistry) -> set[str]:
    """What a scrape of `registry` can hold, labelled families with no children yet included."""
    names = set()
    for family in registry.collect():
        names |= {family.name + suffix for suffix in SUFFIXES.get(family.type, ("",))}
    return names


@pytest.fixture(scope="module")
def exposed() -> Iterator[set[str]]:
    plane = Dispatch(":memory:")
    daemon = DaemonMetrics()
    daemon.watch(lambda: [], lambda: False)
    try:
        yield (
            sample_names(ServerMetrics(plane.store).registry)
            | sample_names(daemon.registry)
            | sample_names(ControllerMetrics().registry)
        )
    finally:
        plane.close()


def dashboard() -> dict[str, Any]:
    return json.loads(ASSETS.joinpath("lakeshore.json").read_text())  # type: ignore[no-any-return]


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ASSETS.joinpath("alerts.yml").read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def panel_exprs() -> list[tuple[str, str]]:
    return [
        (panel["title"], target["expr"])
        for panel in dashboard()["panels"]
        for target in panel.get("targets", [])
    ]


def test_every_metric_the_dashboard_uses_is_exposed(exposed: set[str]) -> None:
    exprs = panel_exprs()
    assert len(exprs) >= 20
    for title, expr in exprs:
        used = set(METRIC.findall(expr))
        assert used, f"panel {title!r} uses no Lakeshore metric: {expr}"
        assert used <= exposed, f"panel {title!r} uses unknown {sorted(used - exposed)}"


def test_every_metric_the_alerts_use_is_exposed(exposed: set[str]) -> None:
    for rule in rules():
        used = set(METRIC.findall(rule["expr"]))
        assert used or set(re.findall(r"\b\w+\b", rule["expr"])) & BUILTIN, rule["alert"]
        assert used <= exposed, f"alert {rule['alert']} uses unknown {sorted(used - exposed)}"


def test_dashboard_is_importable_grafana_json() -> None:
    board = dashboard()
    assert board["uid"] and board["title"] and isinstance(board["schemaVersion"], int)
    variables = {v["name"] for v in board["templating"]["list"]}
    assert "datasource" in variables
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            assert _balanced(target["expr"]), target["expr"]


def test_alert_rules_have_the_shape_prometheus_loads() -> None:
    doc = yaml.safe_load(ASSETS.joinpath("alerts.yml").read_text())
    assert set(doc) == {"groups"}
    names = [g["name"] for g in doc["groups"]]
    assert len(names) == len(set(names))
    alerts = [r["alert"] for r in rules()]
    assert len(alerts) == len(set(alerts))
    # the four things the issue asks to be told about
    for topic in ("Queue", "Lease", "Controller", "Daemon"):
        assert any(topic in a for a in alerts), topic
    for rule in rules():
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations", "keep_firing_for"}
        assert isinstance(rule["expr"], str) and _balanced(rule["expr"]), rule["alert"]
        assert "for" not in rule or DURATION.match(rule["for"]), rule["alert"]
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}
        assert rule["annotations"]["summary"]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not on PATH")
def test_promtool_accepts_the_rules() -> None:
    with resources.as_file(ASSETS.joinpath("alerts.yml")) as path:
        out = subprocess.run(
            ["promtool", "check", "rules", str(Path(path))],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.returncode == 0, out.stdout + out.stderr


def _balanced(expr: str) -> bool:
    depth = {"(": 0, "{": 0, "[": 0}
    closing = {")": "(", "}": "{", "]": "["}
    for ch in re.sub(r'"[^"]*"', "", expr):
        if ch in depth:
            depth[ch] += 1
        elif ch in closing:
            depth[closing[ch]] -= 1
            if depth[closing[ch]] < 0:
                return False
    return not any(depth.values())
