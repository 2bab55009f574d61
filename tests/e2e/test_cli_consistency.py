"""The CLI's shared conventions (issue 19, item 5), checked verb by verb on the embedded plane:
`ls` with `list` as a hidden alias, `--json` on mutations saying what changed, ISO times and
real nulls in JSON, and `submit --payload / --payload-json` with `--json` deprecated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from dreamlake.lakeshore import codec
from dreamlake.lakeshore.cli.main import cli
from dreamlake.lakeshore.plane.default import open_plane
from tests.support import claiming


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    for key in ("LAKESHORE_URL", "LAKESHORE_TOKEN", "LAKESHORE_NAMESPACE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("LAKESHORE_HOME", str(tmp_path))
    runner = CliRunner()

    def invoke(*args: str, code: int = 0) -> Result:
        result = runner.invoke(cli, list(args), catch_exceptions=False)
        assert result.exit_code == code, (args, result.output)
        return result

    return invoke


@pytest.mark.parametrize("group", ["queues", "jobs", "daemon", "providers"])
def test_ls_everywhere_with_list_a_hidden_alias(run, group):
    assert json.loads(run(group, "ls", "--json").stdout) == json.loads(
        run(group, "list", "--json").stdout
    )
    listed = run(group, "--help").stdout
    assert " ls " in listed and " list " not in listed


def test_json_times_are_iso_and_stats_desired_is_null(run):
    row = json.loads(run("queues", "add", "q1", "--json").stdout)
    assert row["created_at"].endswith("+00:00") and "T" in row["created_at"]
    stats = json.loads(run("queues", "stats", "q1", "--json").stdout)
    assert stats["desired"] is None  # never decided: null, not "-"
    assert "-" in run("queues", "stats", "q1").stdout.split("desired")[1].splitlines()[0]


def test_mutations_print_what_changed_with_json(run):
    run("queues", "add", "q2")
    run("queues", "add", "q3")
    plane = open_plane(None, None, None)
    try:
        plane.register_worker("box-1", queues=["q2"])
    finally:
        plane.close()
    updated = json.loads(
        run(
            "daemon", "update", "box-1", "--add-queue", "q3", "--remove-queue", "q2", "--json"
        ).stdout
    )
    assert (updated["queues_before"], updated["added"], updated["removed"]) == (
        ["q2"],
        ["q3"],
        ["q2"],
    )
    drained = run("daemon", "drain", "box-1", "--json")
    assert json.loads(drained.stdout) == {
        "daemon": "box-1",
        "id": json.loads(drained.stdout)["id"],
        "state_before": "alive",
        "state": "draining",
    }
    assert "box-1: draining" in drained.stderr
    removed = json.loads(run("queues", "rm", "q2", "--json").stdout)
    assert removed == {"queue": "q2", "namespace": "default", "deleted": True, "forced": False}
    run("providers", "add", "here", "--kind", "local")
    gone = json.loads(run("providers", "rm", "here", "--json").stdout)
    assert gone == {"provider": "here", "namespace": "default", "deleted": True}
    stopped = json.loads(run("daemon", "stop", "box-1", "--timeout-s", "0", "--json").stdout)
    assert stopped["drained"] == ["box-1"] and stopped["terminated"] == []


def test_submit_payload_options(run):
    text = run("submit", "default", "--payload", "hello").stdout.strip()
    as_json = run("submit", "default", "--payload-json", '{"a": [1, 2]}').stdout.strip()
    legacy = run("submit", "default", "--json", "[3]")
    assert "deprecated" in legacy.stderr and "--payload-json" in legacy.stderr
    legacy_id = legacy.stdout.strip()
    plane = open_plane(None, None, None)
    try:  # claimed in submit order: each payload as a worker receives it
        claims = [claiming.claim(plane, ["default"], worker="w", wait_s=1.0) for _ in range(3)]
    finally:
        plane.close()
    assert [c.id for c in claims if c] == [text, as_json, legacy_id]
    values = [codec.decode(c.payload) for c in claims if c]
    assert values == ["hello", {"a": [1, 2]}, [3]]
    both = run("submit", "default", "--payload", "x", "--payload-json", "1", code=2)
    assert "one payload option" in both.output
