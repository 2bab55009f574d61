"""`lakeshore queues` verbs, run as a real command against the server and on the embedded plane;
plus `lakeshore tokens` / `lakeshore namespaces` on the server's store."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from dreamlake.lakeshore.cli.main import cli
from tests.support.server import LAUNCH


def lakeshore(*args: str, env: dict[str, str], ok: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-c", LAUNCH, *args], env=env, capture_output=True, text=True, timeout=60
    )
    if ok:
        assert result.returncode == 0, result.stderr
    return result


@pytest.fixture
def cli_env(server, tenant, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESHORE_")}
    env.update(
        LAKESHORE_URL=server.url,
        LAKESHORE_TOKEN=tenant.token,
        LAKESHORE_NAMESPACE=tenant.namespace,
        LAKESHORE_HOME=str(tmp_path),
    )
    return env


def test_queue_verbs_against_the_server(cli_env, tenant, http_plane):
    env = cli_env
    out = lakeshore(
        "queues",
        "add",
        "cpu-prep",
        "--kind",
        "fifo",
        "--elasticity",
        "fixed",
        "--max",
        "4",
        "--json",
        env=env,
    )
    assert json.loads(out.stdout)["elasticity"] == {"kind": "fixed", "max": 4}
    lakeshore(
        "queues",
        "add",
        "training-h100",
        "--kind",
        "priority",
        "--max-depth",
        "10",
        "--on-full",
        "reject",
        env=env,
    )
    rows = json.loads(lakeshore("queues", "ls", "--json", env=env).stdout)
    assert {r["name"] for r in rows} == {"cpu-prep", "training-h100", "default"}
    assert "training-h100" in lakeshore("queues", "ls", env=env).stdout  # the table

    patched = json.loads(
        lakeshore(
            "queues",
            "patch",
            "training-h100",
            "--max-depth",
            "1000",
            "--description",
            "h100 production",
            "--json",
            env=env,
        ).stdout
    )
    assert patched["admission"] == {"max_depth": 1000, "on_full": "reject"}
    assert patched["description"] == "h100 production"
    refused = lakeshore("queues", "patch", "training-h100", "--kind", "filo", env=env, ok=False)
    assert refused.returncode != 0 and "cannot change --kind" in refused.stderr

    plane = http_plane(namespace=tenant.namespace, token=tenant.token)
    plane.register_worker("train-00", queues=["training-h100"])
    shown = json.loads(lakeshore("queues", "show", "training-h100", "--json", env=env).stdout)
    assert [m["name"] for m in shown["members"]] == ["train-00"]
    assert "train-00" in lakeshore("queues", "show", "training-h100", env=env).stdout

    stats = json.loads(lakeshore("queues", "stats", "training-h100", "--json", env=env).stdout)
    assert stats["daemon_count"] == 1 and stats["pending"] == 0

    assert "draining" in lakeshore("queues", "drain", "training-h100", env=env).stdout
    assert "archived" in lakeshore("queues", "archive", "training-h100", env=env).stdout
    assert "active" in lakeshore("queues", "unarchive", "training-h100", env=env).stdout
    events = json.loads(
        lakeshore(
            "queues", "events", "training-h100", "--verbose", "--limit", "3", "--json", env=env
        ).stdout
    )
    assert [e["kind"] for e in events] == ["unarchived", "archived", "drained"]
    assert "detail" in events[0]

    rm = lakeshore("queues", "rm", "training-h100", env=env, ok=False)
    assert rm.returncode == 1 and "Conflict" in rm.stderr and "train-00" in rm.stderr
    lakeshore("queues", "rm", "training-h100", "--force", env=env)
    assert plane.worker("train-00").queues == []
    gone = lakeshore("queues", "show", "training-h100", env=env, ok=False)
    assert gone.returncode == 1 and "NotFound" in gone.stderr


def test_default_queue_is_reserved_from_the_cli(cli_env):
    out = lakeshore("queues", "archive", "default", env=cli_env, ok=False)
    assert out.returncode == 1 and "Conflict" in out.stderr


def test_add_needs_max_for_a_scaling_policy(cli_env):
    out = lakeshore("queues", "add", "q1", "--elasticity", "elastic", env=cli_env, ok=False)
    assert out.returncode == 2 and "--max" in out.stderr


def test_verbs_work_on_the_embedded_plane(tmp_path, monkeypatch):
    for key in ("LAKESHORE_URL", "LAKESHORE_TOKEN", "LAKESHORE_NAMESPACE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("LAKESHORE_HOME", str(tmp_path))
    runner = CliRunner()
    result = runner.invoke(cli, ["queues", "add", "local-q", "--description", "here"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(cli, ["queues", "ls", "--json"])
    assert {r["name"] for r in json.loads(result.output)} == {"local-q", "default"}
    result = runner.invoke(cli, ["queues", "events", "local-q", "--json"])
    assert [e["kind"] for e in json.loads(result.output)] == ["created"]
    assert runner.invoke(cli, ["queues", "rm", "local-q"]).exit_code == 0
    assert (tmp_path / "lakeshore.db").exists()


def _namespaces(env: dict[str, str]) -> set[str]:
    return {r["name"] for r in json.loads(lakeshore("namespaces", "ls", "--json", env=env).stdout)}


def test_a_read_of_an_unknown_namespace_creates_nothing_on_the_embedded_plane(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESHORE_")}
    env["LAKESHORE_HOME"] = str(tmp_path)
    default = json.loads(lakeshore("queues", "ls", "--json", env=env).stdout)
    assert [r["name"] for r in default] == ["default"]  # a fresh home works in its own namespace

    for read in (("queues", "ls"), ("queues", "show", "default"), ("jobs", "ls")):
        out = lakeshore(*read, "--namespace", "typo-ns", env=env, ok=False)
        assert out.returncode == 1, (read, out.stdout)
        assert "NotFound: unknown namespace 'typo-ns'" in out.stderr, read

    assert _namespaces(env) == {"default"}
    lakeshore("queues", "add", "prep", "--namespace", "team-b", env=env)  # a write creates it
    rows = json.loads(lakeshore("queues", "ls", "--json", "--namespace", "team-b", env=env).stdout)
    assert {(r["namespace"], r["name"]) for r in rows} == {
        ("team-b", "prep"),
        ("team-b", "default"),
    }
    assert _namespaces(env) == {"default", "team-b"}


def test_a_read_of_an_unknown_namespace_is_not_found_over_http_too(cli_env):
    out = lakeshore("queues", "ls", "--namespace", "typo-ns", env=cli_env, ok=False)
    assert out.returncode == 1 and "NotFound: unknown namespace 'typo-ns'" in out.stderr


def test_tokens_and_namespaces_commands(server, cli_env):
    env = {**cli_env, "LAKESHORE_HOME": str(server.home)}
    store = ["--store", str(server.store_path)]
    lakeshore("namespaces", "add", "cli-alice", "--org", "cli-org", *store, env=env)
    token = lakeshore(
        "tokens", "create", "--namespace", "cli-bob", "--org", "cli-org", *store, env=env
    ).stdout.strip()
    assert token.startswith("lks_")
    names = {
        r["name"]: r["org"]
        for r in json.loads(lakeshore("namespaces", "ls", "--json", *store, env=env).stdout)
    }
    assert names["cli-alice"] == names["cli-bob"] == "cli-org"
    listed = json.loads(lakeshore("tokens", "ls", "--json", *store, env=env).stdout)
    assert all(token not in json.dumps(r) for r in listed)
    assert not any(r["admin"] for r in listed if r["namespace"] == "cli-bob")
    made = lakeshore(
        "tokens", "create", "--namespace", "cli-ops", "--admin", "--json", *store, env=env
    )  # fmt: skip
    ops = json.loads(made.stdout)
    assert ops["token"].startswith("lks_") and ops["admin"] is True and "admin" in ops["scopes"]
    listed = json.loads(lakeshore("tokens", "ls", "--json", *store, env=env).stdout)
    assert [r["admin"] for r in listed if r["namespace"] == "cli-ops"] == [True]
    assert [r["created_at"] for r in listed if r["hash"] == ops["hash"]] == [ops["created_at"]]
    assert ops["created_at"].endswith("+00:00")  # ISO 8601 in UTC, not epoch seconds
    # bob's token reaches its org sibling alice through the server
    env.update(LAKESHORE_TOKEN=token, LAKESHORE_NAMESPACE="cli-alice")
    rows = json.loads(lakeshore("queues", "ls", "--json", env=env).stdout)
    assert {(r["namespace"], r["name"]) for r in rows} >= {
        ("cli-alice", "default"),
        ("cli-bob", "default"),
    }


def test_the_queues_page_worked_example_runs_as_written(cli_env):
    # Given the Queues page's commands, verbatim
    lakeshore("queues", "add", "cpu-prep", "--kind", "fifo", "--elasticity", "fixed", env=cli_env)
    lakeshore(
        "queues", "add", "training-h100", "--kind", "priority", "--elasticity", "fixed", env=cli_env
    )
    lakeshore(
        "queues",
        "patch",
        "training-h100",
        "--max-depth",
        "1000",
        "--on-full",
        "reject",
        env=cli_env,
    )

    # Then both queues exist as declared: a hand-launched fixed fleet, admission applied
    rows = {
        q["name"]: q for q in json.loads(lakeshore("queues", "ls", "--json", env=cli_env).stdout)
    }
    assert rows["cpu-prep"]["kind"] == "fifo"
    assert rows["training-h100"]["kind"] == "priority"
    assert rows["training-h100"]["elasticity"] == {"kind": "fixed"}
    assert rows["training-h100"]["admission"] == {"max_depth": 1000, "on_full": "reject"}


def test_an_elastic_queue_without_max_is_a_usage_error(cli_env):
    result = lakeshore("queues", "add", "burst", "--elasticity", "elastic", env=cli_env, ok=False)

    assert result.returncode == 2
    assert "--elasticity elastic needs --max N" in result.stderr
