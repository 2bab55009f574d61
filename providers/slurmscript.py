"""The slurm provider's config check and the batch script it submits for one daemon.

Everything the job asks of Slurm is a `#SBATCH` line in the script, so `scontrol write
batch_script JOB` shows the whole request. The script holds no secret: the plane's token is
written once per token to `<state_dir>/tokens/<hash>` (directory 0700, file 0600, the
submitting user's), and the script reads it into the daemon's environment, never onto a command
line. A cluster whose nodes do not share `state_dir` with the controller's host names a token
file that exists on every node instead (`token_file`), and the provider writes none.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.shapes import check_shape

from .base import TAG_DAEMON, LaunchSpec, ProviderError

#: Setting -> what it must be, for the error that names a bad one.
SETTINGS: dict[str, str] = {
    "partition": "a partition name",
    "account": "an account name",
    "qos": "a QOS name",
    "time": "a time limit: minutes, or Slurm's [D-]HH:MM:SS",
    "cpus_per_task": "a whole number of CPUs (1 or more)",
    "mem": "memory per node: megabytes, or a size such as 16G",
    "gpus": "a whole number of GPUs (0 or more)",
    "gpu_type": "a GPU type as the cluster's gres.conf names it, e.g. h100",
    "gres": "a raw --gres value, e.g. gpu:h100:4 (instead of gpus/gpu_type)",
    "shape": "what each daemon offers, over what gres says: an object of gpus, gpu_type, "
    "gpu_memory_gb, cpus, memory_gb",
    "sbatch_args": "extra sbatch options: a list, or one string split as a shell would",
    "export": "sbatch --export: ALL (the default), NONE, or VAR[,VAR...]",
    "command": "the daemon command on the nodes (default lakeshore-daemon)",
    "args": "extra daemon arguments: a list, or one string",
    "env": "an object of variable names to values for the daemon (no secret: the script shows it)",
    "concurrency": "the daemon's --concurrency",
    "lease_s": "the daemon's --lease-s",
    "drain_timeout_s": "seconds a signalled daemon may drain (default 60)",
    "labels": "an object of worker labels",
    "state_dir": "where scripts' logs and the token file go; the nodes must see it",
    "token_file": "a file on every node holding the plane's token (the provider writes none)",
    "bin_dir": "where sbatch, squeue and scancel are (default: PATH)",
    "command_timeout_s": "how long one Slurm command may take (default 30)",
}

#: Slurm's own margin: "the signal may be sent up to 60 seconds earlier than specified".
SIGNAL_SLACK_S = 60
DRAIN_TIMEOUT_S = 60.0
_TIME = re.compile(r"^(\d+-)?\d+(:\d+){0,2}$|^\d+-\d+$|^(UNLIMITED|INFINITE)$")
_MEM = re.compile(r"^\d+[KMGT]?$")
_WORD = re.compile(r"^[A-Za-z0-9_.:+-]+$")


def _bad(key: str, value: object) -> ProviderError:
    return ProviderError(f"slurm setting {key}={value!r} is not {SETTINGS[key]}")


def _args(key: str, value: object) -> list[str]:
    if isinstance(value, str):
        return shlex.split(value)
    if isinstance(value, list) and all(isinstance(a, str | int | float) for a in value):
        return [str(a) for a in value]
    raise _bad(key, value)


def _is_word(value: object) -> bool:
    return isinstance(value, str) and bool(_WORD.match(value))


def _is_whole(low: int) -> Callable[[object], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= low


def _is_positive(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _is_args(value: object) -> bool:
    return isinstance(value, str) or (
        isinstance(value, list) and all(isinstance(a, str | int | float) for a in value)
    )


def _is_env(value: object) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k) for k in value
    )


def _is_shape(value: object) -> bool:
    try:
        check_shape(value)
    except InvalidArgument:
        return False
    return True


#: Setting -> whether a value is acceptable; SETTINGS says what is.
CHECKS: dict[str, Callable[[object], bool]] = {
    "partition": _is_word,
    "account": _is_word,
    "qos": _is_word,
    "gpu_type": _is_word,
    "gres": _is_word,
    "time": lambda v: not isinstance(v, bool) and bool(_TIME.match(str(v))),
    "mem": lambda v: not isinstance(v, bool) and bool(_MEM.match(str(v))),
    "cpus_per_task": _is_whole(1),
    "gpus": _is_whole(0),
    "concurrency": _is_whole(1),
    "lease_s": _is_positive,
    "drain_timeout_s": _is_positive,
    "command_timeout_s": _is_positive,
    "sbatch_args": _is_args,
    "args": _is_args,
    "command": _is_args,
    "export": lambda v: isinstance(v, str) and bool(re.fullmatch(r"[A-Za-z0-9_,]+", v)),
    "env": _is_env,
    "labels": lambda v: isinstance(v, dict),
    "shape": _is_shape,
    "state_dir": lambda v: isinstance(v, str) and bool(v),
    "token_file": lambda v: isinstance(v, str) and bool(v),
    "bin_dir": lambda v: isinstance(v, str) and bool(v),
}


def check_config(config: Mapping[str, Any]) -> None:
    """Refuse an unknown setting or a value of the wrong shape, naming it and what is allowed."""
    unknown = sorted(set(config) - set(SETTINGS))
    if unknown:
        raise ProviderError(
            f"unknown slurm setting {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(sorted(SETTINGS))}"
        )
    for key, value in config.items():
        if not CHECKS[key](value):
            raise _bad(key, value)
    for arg in _args("sbatch_args", config.get("sbatch_args", [])):
        if not arg.startswith("-"):
            raise ProviderError(
                f"slurm setting sbatch_args: {arg!r} is not an option (write --opt=value)"
            )
    if "gres" in config and ("gpus" in config or "gpu_type" in config):
        raise ProviderError("slurm settings: give gres, or gpus (with gpu_type), not both")


def state_dir(name: str, settings: Mapping[str, Any]) -> Path:
    from dreamlake.lakeshore.home import home

    return Path(settings.get("state_dir") or home() / "providers" / name)


def token_path(directory: Path, token: str) -> Path:
    """The token's file, written once (0600 in a 0700 directory) and shared by its daemons."""
    tokens = directory / "tokens"
    tokens.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(tokens, 0o700)
    path = tokens / hashlib.sha256(token.encode()).hexdigest()[:16]
    if path.exists() and path.read_text() == token:
        return path
    tmp = tokens / f".{path.name}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token)
    os.replace(tmp, path)
    return path


def comment(tags: Mapping[str, str]) -> str:
    """The job's tags as its --comment: `key=value,...` (names and hashes hold no ',' or '=')."""
    return ",".join(f"{k}={v}" for k, v in tags.items())


def parse_comment(text: str) -> dict[str, str]:
    out = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and key.startswith("lakeshore:"):
            out[key] = value
    return out


def sbatch_lines(
    settings: Mapping[str, Any], tags: Mapping[str, str], directory: Path
) -> list[str]:
    """The job's `#SBATCH` options: its name and tags, its shape, and where its log goes."""
    drain = float(settings.get("drain_timeout_s", DRAIN_TIMEOUT_S))
    opts = [
        f"--job-name={tags[TAG_DAEMON]}",
        f"--comment={comment(tags)}",
        f"--output={directory}/%x-%j.log",
        f"--chdir={directory}",
        # the batch shell is the daemon (exec): TERM makes it drain before the time limit
        f"--signal=B:TERM@{int(drain) + SIGNAL_SLACK_S}",
        f"--export={settings.get('export', 'ALL')}",
    ]
    for key, flag in (("partition", "partition"), ("account", "account"), ("qos", "qos")):
        if settings.get(key):
            opts.append(f"--{flag}={settings[key]}")
    if "cpus_per_task" in settings:
        opts.append(f"--cpus-per-task={int(settings['cpus_per_task'])}")
    if "mem" in settings:
        opts.append(f"--mem={settings['mem']}")
    if "time" in settings:
        opts.append(f"--time={settings['time']}")
    if settings.get("gres"):
        opts.append(f"--gres={settings['gres']}")
    elif int(settings.get("gpus", 0)):
        kind = f"gpu:{settings['gpu_type']}" if settings.get("gpu_type") else "gpu"
        opts.append(f"--gres={kind}:{int(settings['gpus'])}")
    opts += _args("sbatch_args", settings.get("sbatch_args", []))
    return [f"#SBATCH {opt}" for opt in opts]


def plane_exports(spec: LaunchSpec, token_file: str | None) -> list[str]:
    """How the daemon finds the plane: an http(s) URL and the token read from its file, or a
    SQLite file's directory as LAKESHORE_HOME (a one-box cluster, or a shared filesystem)."""
    from dreamlake.lakeshore.home import home

    url = spec.plane_url
    lines = [f"export LAKESHORE_NAMESPACE={shlex.quote(spec.namespace)}"]
    if url and url.startswith(("http://", "https://")):
        lines.append(f"export LAKESHORE_URL={shlex.quote(url)}")
        if token_file:
            quoted = shlex.quote(token_file)
            lines += [
                f"if [ ! -r {quoted} ]; then",
                f'  echo "lakeshore: cannot read the token file {token_file} on $(hostname):'
                " give the nodes the provider"
                "'"
                's state_dir, or set token_file" >&2',
                "  exit 78",
                "fi",
                f'LAKESHORE_TOKEN="$(cat -- {quoted})"',
                "export LAKESHORE_TOKEN",
            ]
        return lines
    if url:
        path = Path(url.removeprefix("sqlite:///"))
        if path.name != "lakeshore.db":
            raise ProviderError(
                f"slurm daemons open $LAKESHORE_HOME/lakeshore.db; cannot point them at {path}"
                " (name the file lakeshore.db, or serve it with `lakeshore server`)"
            )
        lines.append(f"export LAKESHORE_HOME={shlex.quote(str(path.parent))}")
    else:
        here = os.environ.get("LAKESHORE_HOME") or str(home())
        lines.append(f"export LAKESHORE_HOME={shlex.quote(here)}")
    return lines


def daemon_command(spec: LaunchSpec, daemon: str, settings: Mapping[str, Any]) -> list[str]:
    cmd = _args("command", settings.get("command", "lakeshore-daemon"))
    cmd += ["--name", daemon, "--log-json"]
    for q in spec.queues:
        cmd += ["--queue", q]
    if "concurrency" in settings:
        cmd += ["--concurrency", str(int(settings["concurrency"]))]
    if "lease_s" in settings:
        cmd += ["--lease-s", str(float(settings["lease_s"]))]
    cmd += ["--drain-timeout-s", str(float(settings.get("drain_timeout_s", DRAIN_TIMEOUT_S)))]
    labels = {**dict(settings.get("labels") or {}), **spec.labels}
    for key, value in sorted(labels.items()):
        cmd += ["--label", f"{key}={value}"]
    return cmd + _args("args", settings.get("args", []))


def render(
    spec: LaunchSpec,
    daemon: str,
    settings: Mapping[str, Any],
    *,
    provider: str,
    directory: Path,
    token_file: str | None,
) -> str:
    """The batch script for one daemon: options, environment, then `exec` the daemon, so that
    the batch shell Slurm signals is the daemon itself."""
    tags = spec.tags(daemon, provider)
    env: Mapping[str, Any] = settings.get("env") or {}
    return "\n".join(
        [
            "#!/bin/bash",
            *sbatch_lines(settings, tags, directory),
            f"# Lakeshore daemon {daemon}, rendered by the slurm provider {provider!r}.",
            "# It holds no secret: the token is read from a file only its user can read.",
            "set -euo pipefail",
            *plane_exports(spec, token_file),
            *(f"export {k}={shlex.quote(str(v))}" for k, v in sorted(env.items())),
            "exec " + shlex.join(daemon_command(spec, daemon, settings)),
            "",
        ]
    )
