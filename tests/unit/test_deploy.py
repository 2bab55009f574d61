"""deploy/: the server and daemon Dockerfiles and the compose file hold together.

Building the images needs a Docker daemon and a registry, which a test machine may lack; what
can go wrong without one is checked here: every path a Dockerfile copies exists and survives its
.dockerignore, every command an image runs is a console script of this package whose options
parse, the compose services point at each other consistently, and the entry point script does
what it says. `docker compose config` runs too where the compose plugin is installed.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
import pytest
import tomllib
import yaml

from dreamlake.lakeshore.cli.main import cli
from dreamlake.lakeshore.daemon.main import daemon_command

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DOCKERFILES = ("server.Dockerfile", "daemon.Dockerfile")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SCRIPTS = set(PYPROJECT["project"]["scripts"])
EXTRAS = set(PYPROJECT["project"]["optional-dependencies"])
#: Where the images install deploy/entrypoint.sh.
ENTRYPOINT = "/usr/local/bin/lakeshore-entrypoint"


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in (DEPLOY / dockerfile).read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        word, _, rest = (pending + line).partition(" ")
        out.append((word.upper(), rest.strip()))
        pending = ""
    return out


def arg_default(dockerfile: str, name: str) -> str:
    (value,) = [rest.split("=", 1)[1] for word, rest in instructions(dockerfile)
                if word == "ARG" and rest.startswith(f"{name}=")]  # fmt: skip
    return value


def copies(dockerfile: str) -> list[tuple[list[str], str]]:
    """(sources, destination) of each COPY from the build context (not `--from` a stage)."""
    out = []
    for word, rest in instructions(dockerfile):
        if word != "COPY":
            continue
        parts = shlex.split(rest)
        if any(p.startswith("--from=") for p in parts):
            continue
        paths = [p for p in parts if not p.startswith("--")]
        out.append((paths[:-1], paths[-1]))
    return out


def exec_form(dockerfile: str, instruction: str) -> list[str]:
    (value,) = [rest for word, rest in instructions(dockerfile) if word == instruction]
    parsed = json.loads(value)
    assert isinstance(parsed, list), f"{dockerfile}: {instruction} is not in exec (JSON) form"
    return [str(p) for p in parsed]


def parse_command(argv: list[str]) -> None:
    """Parse `argv` with the package's own click commands: an option they lack fails here."""
    script, *args = argv
    assert script in SCRIPTS, f"{script} is not a console script of pyproject.toml: {SCRIPTS}"
    if script == "lakeshore-daemon":
        daemon_command.make_context(script, list(args))
        return
    assert script == "lakeshore", script
    name, *rest = args
    group_ctx = cli.make_context(script, [name], resilient_parsing=True)
    command = cli.get_command(group_ctx, name)
    assert isinstance(command, click.Command), f"lakeshore has no command {name!r}"
    command.make_context(name, list(rest), parent=group_ctx)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((DEPLOY / "compose.yaml").read_text()))


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_every_path_a_dockerfile_copies_exists_and_is_sent_to_the_build(dockerfile: str) -> None:
    ignore = (DEPLOY / f"{dockerfile}.dockerignore").read_text().splitlines()
    sent = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}

    for sources, _ in copies(dockerfile):
        for source in sources:
            assert (ROOT / source).exists(), f"{dockerfile} copies {source}, not in the repo"
            assert source.rstrip("/") in sent, f"{dockerfile}: .dockerignore drops {source}"
    # and the package dirs the wheel is built from are every one pyproject maps
    package_dirs = {
        d.split("/")[0] for d in PYPROJECT["tool"]["setuptools"]["package-dir"].values()
    }
    copied = {s.rstrip("/") for sources, _ in copies(dockerfile) for s in sources}
    assert package_dirs <= copied, package_dirs - copied


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_an_image_runs_a_console_script_through_the_entry_point(dockerfile: str) -> None:
    assert exec_form(dockerfile, "ENTRYPOINT") == ["lakeshore-entrypoint"]
    assert (["deploy/entrypoint.sh"], ENTRYPOINT) in copies(dockerfile)
    parse_command(exec_form(dockerfile, "CMD"))
    extras = arg_default(dockerfile, "EXTRAS").split(",")
    assert set(extras) <= EXTRAS, set(extras) - EXTRAS


def test_the_daemon_image_defaults_to_a_cuda_runtime_base() -> None:
    base = arg_default("daemon.Dockerfile", "BASE_IMAGE")
    assert base.startswith("nvidia/cuda:") and "-runtime-" in base, base
    assert "gpu" in arg_default("daemon.Dockerfile", "EXTRAS").split(",")


def test_the_compose_services_point_at_each_other(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"postgres", "server", "daemon"}
    for name in ("server", "daemon"):
        build = services[name]["build"]
        assert (DEPLOY / build["context"] / build["dockerfile"]).resolve() == (
            DEPLOY / f"{name}.Dockerfile"
        )
    # the server's store is the postgres service, with its user, password and database
    pg = services["postgres"]["environment"]
    store = urlsplit(services["server"]["environment"]["LAKESHORE_STORE"])
    assert (store.scheme, store.hostname, store.port) == ("postgresql", "postgres", 5432)
    assert (store.username, store.password, store.path) == (
        pg["POSTGRES_USER"],
        pg["POSTGRES_PASSWORD"],
        "/" + pg["POSTGRES_DB"],
    )
    assert services["server"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    # the daemon reaches the server by its service name and the port the image exposes
    url = urlsplit(services["daemon"]["environment"]["LAKESHORE_URL"])
    exposed = [rest for word, rest in instructions("server.Dockerfile") if word == "EXPOSE"]
    assert (url.hostname, [str(url.port)]) == ("server", exposed)
    assert services["daemon"]["depends_on"]["server"]["condition"] == "service_healthy"
    parse_command(services["daemon"]["command"])


def test_the_daemon_reads_the_token_the_server_writes(compose: dict[str, Any]) -> None:
    services = compose["services"]
    server_home = [rest for word, rest in instructions("server.Dockerfile") if word == "ENV"]
    assert any("LAKESHORE_HOME=/var/lib/lakeshore" in env for env in server_home)
    assert "server-home:/var/lib/lakeshore" in services["server"]["volumes"]
    token_file = Path(services["daemon"]["environment"]["LAKESHORE_TOKEN_FILE"])
    assert f"server-home:{token_file.parent}:ro" in services["daemon"]["volumes"]
    assert token_file.name == "token"  # what the server's first start writes (plane/auth.py)
    assert {"pgdata", "server-home"} <= set(compose["volumes"])


def test_the_gpu_override_brings_the_cuda_base_and_the_gpus() -> None:
    gpu = yaml.safe_load((DEPLOY / "compose.gpu.yaml").read_text())["services"]["daemon"]
    assert gpu["build"]["args"]["BASE_IMAGE"] == arg_default("daemon.Dockerfile", "BASE_IMAGE")
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]


def test_the_entry_point_reads_the_token_file_then_runs_the_command(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("lks_secret\n")
    env = {"PATH": os.environ["PATH"], "LAKESHORE_TOKEN_FILE": str(token)}
    script = str(DEPLOY / "entrypoint.sh")
    assert os.access(script, os.X_OK)

    run = subprocess.run(
        [script, "sh", "-c", 'printf %s "$LAKESHORE_TOKEN"'],
        env=env, capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    assert run.stdout == "lks_secret"
    # a token given directly wins over the file
    given = subprocess.run(
        [script, "sh", "-c", 'printf %s "$LAKESHORE_TOKEN"'],
        env={**env, "LAKESHORE_TOKEN": "lks_direct"},
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    assert given.stdout == "lks_direct"
    # the command's exit status is the container's
    failed = subprocess.run([script, sys.executable, "-c", "raise SystemExit(3)"], env=env)
    assert failed.returncode == 3


def _has_compose() -> bool:
    docker = shutil.which("docker")
    if docker is None:
        return False
    probe = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=30)
    return probe.returncode == 0


@pytest.mark.skipif(not _has_compose(), reason="the docker compose plugin is not installed")
def test_docker_compose_accepts_the_files() -> None:
    for files in (["compose.yaml"], ["compose.yaml", "compose.gpu.yaml"]):
        args = [a for f in files for a in ("-f", str(DEPLOY / f))]
        subprocess.run(["docker", "compose", *args, "config", "-q"], check=True, timeout=60)
