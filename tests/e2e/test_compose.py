"""`lakeshore compose`: validate, diff, up, down, against a real server (and once embedded).

The round trip: an empty namespace, `diff` shows creates, `up` makes them, `diff --exit-code`
is then in sync; an edited file patches in place (a removed setting is removed), a kind change
is refused before anything is written, `--prune` deletes what the file no longer names, and
`down` removes the file's queues but never the default one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from dreamlake.lakeshore.cli.main import cli
from dreamlake.lakeshore.compose import ComposeError, parse
from dreamlake.lakeshore.errors import NotFound
from tests.support.server import LAUNCH

FIRST = """\
queues:
  cpu-prep:
    kind: fifo
    description: CPU pre-processing
    elasticity: {kind: fixed, max: 4}
    admission: {max_depth: 1000, on_full: reject}
  training-h100:
    kind: priority
    admission:
      rate_limit: 50
providers:
  my-ec2: {kind: ec2, region: us-east-1}
daemons:
  train: {provider: my-ec2, queues: [training-h100], count: 2}
"""

EDITED = """\
queues:
  cpu-prep:
    kind: fifo
    elasticity: {kind: elastic, min: 1, max: 8}
    admission: {max_depth: 500}
  training-h100:
    kind: priority
    state: draining
"""


@pytest.fixture
def env(server, tenant, tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESHORE_")}
    env.update(
        LAKESHORE_URL=server.url,
        LAKESHORE_TOKEN=tenant.token,
        LAKESHORE_NAMESPACE=tenant.namespace,
        LAKESHORE_HOME=str(tmp_path),
    )
    return env


def compose(env: dict[str, str], path: Path, *args: str, code: int = 0) -> Result:
    result = CliRunner().invoke(cli, ["compose", *args, "-f", str(path)], env=env)
    assert result.exit_code == code, (result.exit_code, result.output)
    return result


def test_round_trip_against_the_server(env, tmp_path, http_plane, tenant):
    plane = http_plane(namespace=tenant.namespace, token=tenant.token)
    path = tmp_path / "lakeshore.yaml"
    path.write_text(FIRST)

    planned = json.loads(compose(env, path, "diff", "--json").output)
    actions = {(c["target"], c["name"]): c["action"] for c in planned["changes"]}
    assert actions == {
        ("queue", "cpu-prep"): "create",
        ("queue", "training-h100"): "create",
        ("provider", "my-ec2"): "create",
        ("daemon", "train"): "not-applied",
    }
    assert compose(env, path, "diff", "--exit-code", code=2)
    with pytest.raises(NotFound):
        plane.queue("cpu-prep")  # diff wrote nothing

    out = compose(env, path, "up").output
    assert "daemon train: not applied (no daemon launch support" in out
    assert "applied 3 change(s)" in out
    (provider,) = plane.providers()
    assert (provider.name, provider.kind, provider.config) == (
        "my-ec2",
        "ec2",
        {"region": "us-east-1"},
    )
    prep = plane.queue("cpu-prep")
    assert (prep.kind, prep.description) == ("fifo", "CPU pre-processing")
    assert prep.elasticity == {"kind": "fixed", "max": 4}
    assert prep.admission == {"max_depth": 1000, "on_full": "reject"}
    assert plane.queue("training-h100").admission == {"rate_limit": 50}
    assert "in sync" in compose(env, path, "diff", "--exit-code").output
    again = compose(env, path, "up").output  # idempotent
    assert "in sync" in again and "applied" not in again.replace("not applied", "")

    # a changed provider config is replaced (the plane has no provider update)
    path.write_text(FIRST.replace("us-east-1", "eu-west-1"))
    assert "~ provider my-ec2: replace" in compose(env, path, "diff").output
    compose(env, path, "up")
    assert plane.provider("my-ec2").config == {"region": "eu-west-1"}

    # an edit patches in place; what the file no longer says is removed
    path.write_text(EDITED)
    diff = compose(env, path, "diff").output
    assert "~ queue cpu-prep: patch" in diff and "description" in diff
    compose(env, path, "up")
    prep = plane.queue("cpu-prep")
    assert prep.description == ""
    assert prep.elasticity == {"kind": "elastic", "min": 1, "max": 8}  # kind replaced whole
    assert prep.admission.get("max_depth") == 500
    assert prep.admission.get("on_full", "reject") == "reject"
    train = plane.queue("training-h100")
    assert train.state == "draining" and not train.admission.get("rate_limit")
    assert "in sync" in compose(env, path, "diff", "--exit-code").output
    events = [e["kind"] for e in plane.events("cpu-prep")]
    assert events.count("patched") >= 2 and "created" in events

    # a kind change is refused as a whole: nothing else in the plan is applied
    path.write_text(EDITED.replace("kind: priority", "kind: boltzmann").replace("500", "600"))
    refused = compose(env, path, "up", code=1)
    assert "kind cannot change in place" in refused.output
    assert plane.queue("cpu-prep").admission.get("max_depth") == 500

    # --prune deletes what the file no longer names (never the default queue)
    plane.create_queue("stray")
    path.write_text(EDITED)
    assert "- queue stray: delete" not in compose(env, path, "diff").output
    assert "- queue stray: delete" in compose(env, path, "diff", "--prune").output
    compose(env, path, "up", "--prune")
    names = {q.name for q in plane.queues() if q.namespace == tenant.namespace}
    assert names == {"default", "cpu-prep", "training-h100"}
    assert plane.providers() == []  # pruned too: the file no longer names it

    # down removes the file's queues
    path.write_text(EDITED + "  default: {}\n")
    out = compose(env, path, "down").output
    assert "default queue is never deleted" in out
    names = {q.name for q in plane.queues() if q.namespace == tenant.namespace}
    assert names == {"default"}


def test_invalid_files_name_file_line_and_field(env, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            queues:
              ok-queue: {}
              training:
                kind: priorty
                elasticity:
                  kind: fixed
                  maxx: 3
                admission: {on_full: maybe}
                descripton: typo
            daemons:
              d: {provider: nowhere, queues: [missing]}
            """
        )
    )
    out = compose(env, path, "up", code=1).output
    lines = [ln for ln in out.splitlines() if ln.startswith(str(path))]
    assert f"{path}:4:11: queues.training.kind: unknown queue kind 'priorty'" in out
    assert any(":7:7: queues.training.elasticity.maxx" in ln for ln in lines), out
    assert any(":8:26: queues.training.admission.on_full" in ln for ln in lines), out
    assert any(":9:5: queues.training.descripton: unknown field" in ln for ln in lines), out
    assert any("daemons.d.queues.0: queue 'missing'" in ln for ln in lines), out
    assert len(lines) >= 5  # every problem at once, not the first one only

    path.write_text("queues:\n  a: [unclosed\n")
    assert f"{path}:3:1: not valid YAML" in compose(env, path, "validate", code=1).output
    assert "cannot read" in compose(env, tmp_path / "missing.yaml", "validate", code=1).output
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert "valid (0 queue(s)" in compose(env, empty, "validate").output


def test_duplicate_keys_and_namespace_mismatch(env, tmp_path, tenant):
    with pytest.raises(ComposeError) as err:
        parse("queues:\n  a: {}\n  a: {kind: filo}\n", "dup.yaml")
    assert "dup.yaml:3:3: queues.a: duplicate key" in str(err.value)
    path = tmp_path / "ns.yaml"
    path.write_text("namespace: somewhere-else\nqueues: {a: {}}\n")
    out = compose(env, path, "diff", code=1).output
    assert "declares namespace 'somewhere-else'" in out and tenant.namespace in out


def test_up_on_the_embedded_plane(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESHORE_")}
    env["LAKESHORE_HOME"] = str(tmp_path)
    path = tmp_path / "lakeshore.yaml"
    path.write_text("queues:\n  local-q:\n    elasticity: {kind: fully_elastic, max: 2}\n")
    run = [sys.executable, "-c", LAUNCH, "compose", "up", "-f", str(path)]
    done = subprocess.run(run, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    path.write_text("queues:\n  local-q:\n    elasticity: {kind: fixed, max: 3}\n")
    done = subprocess.run(run, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    shown = subprocess.run(
        [sys.executable, "-c", LAUNCH, "queues", "show", "local-q", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert json.loads(shown.stdout)["elasticity"] == {"kind": "fixed", "max": 3}
