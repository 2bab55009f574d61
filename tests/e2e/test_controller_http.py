"""Provider configs and the controller's figures through a real server and the CLI."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from click.testing import CliRunner

from dreamlake.lakeshore.cli.main import cli
from dreamlake.lakeshore.errors import Conflict, InvalidArgument, NotFound
from dreamlake.lakeshore.plane import HttpDispatch


def test_provider_configs_over_http(http_plane: Callable[..., HttpDispatch]) -> None:
    plane = http_plane()
    info = plane.add_provider("gpu", "ec2", {"region": "us-east-1", "spot": True})
    assert (info.namespace, info.kind, info.config["spot"]) == (plane.namespace, "ec2", True)
    assert [p.name for p in plane.providers()] == ["gpu"]
    assert plane.provider("gpu").config["region"] == "us-east-1"
    with pytest.raises(Conflict):
        plane.add_provider("gpu", "ec2", {})
    with pytest.raises(InvalidArgument, match="provider name"):
        plane.add_provider("Not OK", "ec2", {})
    plane.delete_provider("gpu")
    with pytest.raises(NotFound):
        plane.provider("gpu")


def test_providers_cli_and_stats_desired_vs_actual(
    http_plane: Callable[..., HttpDispatch],
) -> None:
    plane = http_plane()
    opts = ["--url", plane.url, "--namespace", plane.namespace]
    runner = CliRunner(env={"LAKESHORE_TOKEN": plane._client.headers["authorization"][7:]})

    missing = runner.invoke(cli, ["providers", "add", "aws", "--kind", "ec2", *opts])
    assert missing.exit_code != 0 and "--kind ec2 needs --region" in missing.output
    ec2 = ["--kind", "ec2", "--region", "eu-west-1", "--instance-type", "g5.xlarge"]
    for bad in (["--spot-fallback-after", "0"], ["--set", "spot_fallback_after=often"]):
        refused = runner.invoke(cli, ["providers", "add", "aws", *ec2, "--ami", "a", *bad, *opts])
        assert refused.exit_code == 2, refused.output
        assert "spot_fallback_after must be a whole number of reclaims, 1 or more" in (
            refused.output
        )
    assert plane.providers() == []  # refused before anything was stored
    added = runner.invoke(
        cli,
        [
            "providers",
            "add",
            "aws",
            "--kind",
            "ec2",
            "--region",
            "eu-west-1",
            "--instance-type",
            "g5.xlarge",
            "--ami",
            "ami-1",
            "--spot",
            "--spot-fallback-after",
            "3",
            "--set",
            "concurrency=4",
            *opts,
        ],
    )
    assert added.exit_code == 0, added.output
    shown = json.loads(runner.invoke(cli, ["providers", "show", "aws", "--json", *opts]).output)
    assert shown["config"] == {
        "region": "eu-west-1",
        "instance_type": "g5.xlarge",
        "ami": "ami-1",
        "spot": True,
        "spot_fallback_after": 3,
        "concurrency": 4,
    }
    assert shown["launch_shape"] == {  # issue 34: the instance type sets it
        "gpus": 1,
        "gpu_type": "A10G",
        "gpu_memory_gb": 24,
        "cpus": 4.0,
        "memory_gb": 16.0,
        "source": "instance type g5.xlarge",
    }
    listed = json.loads(runner.invoke(cli, ["providers", "ls", "--json", *opts]).output)
    assert [p["name"] for p in listed] == ["aws"]
    table = runner.invoke(cli, ["providers", "ls", *opts]).output
    assert "1 x A10G (24 GB)" in table
    bad = runner.invoke(
        cli, ["providers", "add", "gpu8", "--kind", "local", "--set", 'shape={"gpus": 0.5}', *opts]
    )
    assert bad.exit_code != 0 and "provider config shape.gpus must be a whole number" in (
        bad.output
    )
    assert "Traceback" not in bad.output

    # queues stats: desired from the controller's newest decision beside the live count
    plane.create_queue("train", elasticity={"kind": "fixed", "max": 2, "provider": "aws"})
    stats = json.loads(runner.invoke(cli, ["queues", "stats", "train", "--json", *opts]).output)
    assert (stats["desired"], stats["actual"]) == (None, 0)  # JSON null, not "-"

    assert runner.invoke(cli, ["providers", "rm", "aws", *opts]).exit_code == 0
    assert json.loads(runner.invoke(cli, ["providers", "ls", "--json", *opts]).output) == []
