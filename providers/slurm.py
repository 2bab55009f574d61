"""`slurm`: one batch job per daemon on a Slurm cluster, found again by its tags.

`launch` pipes each daemon's batch script (`providers/slurmscript.py`) to `sbatch --parsable`;
the job's name is the daemon's and its `--comment` carries the instance tags, so `list()` is
`squeue --json` (or `squeue --format` where the client predates it) filtered by tag. Slurm
places the job; the daemon it runs serves the GPUs Slurm gave the job, records the job id on its
worker row, and drains on the SIGTERM Slurm sends before the time limit (`--signal=B:TERM@...`),
on preemption and on `scancel`. `terminate` is `scancel`: the controller drains a daemon first
and cancels its job only once it has left, or when it is an orphan (pending past the boot
timeout, or running without a heartbeat).

The provider runs Slurm's client commands on the controller's host, as the controller's user:
that user submits, lists and cancels its own jobs and needs nothing more from Slurm.
Config: see `slurmscript.SETTINGS`; a queue's `match` overrides any of it per pool.
"""

from __future__ import annotations

import builtins
import json
import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from .base import TAG_PROVIDER, Instance, LaunchSpec, ProviderError, matches
from .slurmscript import check_config, parse_comment, render, state_dir, token_path

COMMAND_TIMEOUT_S = 30.0
#: Slurm job states -> Instance states; any other state (COMPLETED, CANCELLED, FAILED,
#: TIMEOUT, NODE_FAIL, PREEMPTED, OUT_OF_MEMORY, ...) is a job that has ended: not listed.
STATES = {
    "PENDING": "pending",
    "CONFIGURING": "pending",
    "REQUEUED": "pending",
    "REQUEUE_HOLD": "pending",
    "REQUEUE_FED": "pending",
    "RESIZING": "running",
    "RUNNING": "running",
    "SUSPENDED": "running",
    "COMPLETING": "terminating",
    "SIGNALING": "terminating",
    "STAGE_OUT": "terminating",
    "STOPPED": "terminating",
}
#: scancel's complaints about jobs that have ended already: nothing left to terminate.
ENDED_ALREADY = ("Invalid job id", "already completing", "Job/step already")
#: The fallback listing: fields split on '|', the comment last (its text is free).
FORMAT = "%i|%T|%V|%r|%k"


class SlurmProvider:
    def __init__(self, name: str, config: Mapping[str, Any] | None = None) -> None:
        config = dict(config or {})
        check_config(config)
        self.name = name
        self.config = config
        self.timeout_s = float(config.get("command_timeout_s", COMMAND_TIMEOUT_S))
        #: Whether this squeue speaks --json (asked once, on the first list).
        self._json: bool | None = None

    # -- the Protocol -------------------------------------------------------------------------

    def launch(self, spec: LaunchSpec, count: int) -> list[Instance]:
        settings = {**self.config, **spec.settings}
        check_config(settings)
        directory = state_dir(self.name, settings)
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        token_file = settings.get("token_file")
        if token_file is None and spec.plane_token and _over_http(spec.plane_url):
            token_file = str(token_path(directory, spec.plane_token))
        return [
            self._submit(spec, daemon, settings, directory, token_file)
            for daemon in spec.daemon_names(count)
        ]

    def terminate(self, ids: Sequence[str]) -> None:
        """`scancel`: Slurm sends the daemon SIGTERM, then SIGKILL after its KillWait; ids of
        jobs that have ended already are ignored."""
        if not ids:
            return
        result = self._run(["scancel", *ids], check=False)
        if result.returncode != 0:
            problems = [
                line
                for line in result.stderr.splitlines()
                if line.strip() and not any(ok in line for ok in ENDED_ALREADY)
            ]
            if problems:
                raise ProviderError(f"scancel failed: {problems[-1].strip()}")

    def list(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
        wanted = {TAG_PROVIDER: self.name, **(tags or {})}
        return [inst for inst in self._jobs() if matches(inst.tags, wanted)]

    # -- Slurm's commands ---------------------------------------------------------------------

    def _submit(
        self,
        spec: LaunchSpec,
        daemon: str,
        settings: Mapping[str, Any],
        directory: Path,
        token_file: str | None,
    ) -> Instance:
        script = render(
            spec,
            daemon,
            settings,
            provider=self.name,
            directory=directory,
            token_file=token_file,
        )
        # --export=ALL hands sbatch's environment to the job: never the controller's own
        # Lakeshore settings and tokens (LAKESHORE_TOKEN, LAKESHORE_CONTROLLER_TOKEN, ...)
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESHORE_")}
        result = self._run(["sbatch", "--parsable"], stdin=script, env=env, check=False)
        if result.returncode != 0:
            error = result.stderr.strip().splitlines()[-1:] or [f"exit {result.returncode}"]
            raise ProviderError(f"sbatch of {daemon} failed: {error[0]}")
        job_id = result.stdout.strip().split(";", 1)[0]
        if not job_id.isdigit():
            raise ProviderError(f"sbatch of {daemon} answered {result.stdout.strip()!r}, no job id")
        return Instance(
            id=job_id,
            tags=spec.tags(daemon, self.name),
            launched_at=time.time(),
            state="pending",
        )

    def _jobs(self) -> builtins.list[Instance]:
        if self._json is None or self._json:
            # --me: the jobs of the controller's user, which are all of its jobs (a squeue
            # that cannot filter --json ignores it and the tags still do)
            result = self._run(["squeue", "--me", "--json"], check=False)
            if result.returncode == 0:
                self._json = True
                return parse_json(result.stdout)
            if self._json is None and "json" in result.stderr.lower():
                self._json = False  # a client without --json: use --format from now on
            else:
                raise ProviderError(f"squeue failed: {_last_line(result)}")
        result = self._run(["squeue", "--me", "--noheader", f"--format={FORMAT}"], check=False)
        if result.returncode != 0:
            raise ProviderError(f"squeue failed: {_last_line(result)}")
        return parse_format(result.stdout)

    def _run(
        self,
        argv: builtins.list[str],
        *,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        exe = self._exe(argv[0])
        try:
            return subprocess.run(
                [exe, *argv[1:]],
                input=stdin,
                env=env,
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                check=check,
            )
        except subprocess.TimeoutExpired as exc:
            raise ProviderError(
                f"{argv[0]} did not answer within {self.timeout_s:g}s (is slurmctld up?)"
            ) from exc
        except OSError as exc:
            raise ProviderError(f"cannot run {exe}: {exc}") from exc

    def _exe(self, tool: str) -> str:
        bin_dir = self.config.get("bin_dir")
        if bin_dir:
            return str(Path(bin_dir) / tool)
        found = shutil.which(tool)
        if found is None:
            raise ProviderError(
                f"{tool} is not on PATH: the slurm provider runs Slurm's client commands on the "
                "controller's host (install slurm-client there, or set bin_dir)"
            )
        return found


def _over_http(url: str | None) -> bool:
    return bool(url) and str(url).startswith(("http://", "https://"))


def _last_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit {result.returncode}"


def _number(value: Any) -> float | None:
    """A time in squeue's JSON: a number (22.05) or {"set": .., "number": ..} (23.02 on)."""
    if isinstance(value, dict):
        return float(value["number"]) if value.get("set", True) and "number" in value else None
    return float(value) if isinstance(value, int | float) else None


def _state(value: Any) -> str:
    """A job state in squeue's JSON: a string (22.05) or a list of flags (23.02 on)."""
    if isinstance(value, list):
        return str(value[0]) if value else ""
    return str(value or "")


def _instance(job_id: str, state: str, submitted: float | None, note: str, text: str) -> Instance:
    tags = parse_comment(text)
    return Instance(
        id=job_id,
        tags=tags,
        launched_at=submitted if submitted is not None else time.time(),
        state=STATES[state],
        note=note if state == "PENDING" and note != "None" else "",
    )


def parse_json(text: str) -> list[Instance]:
    """Live jobs carrying Lakeshore tags, from `squeue --json`."""
    try:
        jobs = json.loads(text).get("jobs", [])
    except (ValueError, AttributeError) as exc:
        raise ProviderError(f"squeue --json answered something else than JSON: {exc}") from exc
    out = []
    for job in jobs:
        state = _state(job.get("job_state"))
        text_ = job.get("comment") or ""
        if state not in STATES or "lakeshore:" not in text_:
            continue
        submitted = _number(job.get("submit_time"))
        note = str(job.get("state_reason") or "")
        out.append(_instance(str(job["job_id"]), state, submitted, note, text_))
    return out


def parse_format(text: str) -> list[Instance]:
    """Live jobs carrying Lakeshore tags, from `squeue --noheader --format=FORMAT`."""
    out = []
    for line in text.splitlines():
        parts = line.split("|", 4)
        if len(parts) < 5:
            continue
        job_id, state, submitted, reason, text_ = parts
        if state not in STATES or "lakeshore:" not in text_:
            continue
        try:
            at: float | None = datetime.fromisoformat(submitted).timestamp()
        except ValueError:
            at = None
        out.append(_instance(job_id.strip(), state, at, reason, text_.strip()))
    return out
