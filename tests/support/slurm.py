"""The Slurm the slurm provider's tests run against: `bash .ci/slurm-up` starts one on this box.

Rule (as for Postgres): no Slurm here (no `sinfo` on PATH, or it does not answer) and the test
skips with one line saying how to start it, unless `CI=true`, where a missing Slurm is a broken
pipeline and the test fails. Each test gets a provider name of its own (`provider_name`), and
every job tagged with it is cancelled when the test ends, passed or failed.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

import pytest

from dreamlake.lakeshore.providers.base import TAG_PROVIDER
from dreamlake.lakeshore.providers.slurm import SlurmProvider

START = "sudo bash .ci/slurm-up"


@cache
def _problem() -> str | None:
    """Why Slurm cannot be used here, or None. Asked once per session."""
    if shutil.which("sinfo") is None:
        return "no sinfo on PATH"
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=15, check=False
        )
    except subprocess.TimeoutExpired:
        return "sinfo did not answer within 15 s"
    if out.returncode != 0:
        return (out.stderr.strip().splitlines() or [f"sinfo exit {out.returncode}"])[-1]
    states = out.stdout.split()
    if not any(s in ("idle", "mixed", "allocated", "completing") for s in states):
        return f"no schedulable node (states: {', '.join(states) or 'none'})"
    return None


def require_slurm() -> None:
    """Skip the test (fail it under CI=true) when no Slurm answers here."""
    problem = _problem()
    if problem is None:
        return
    message = f"Slurm is not running here ({problem}); start it with `{START}`"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message}. CI=true: a missing Slurm fails the run", pytrace=False)
    pytest.skip(message)


@contextmanager
def provider_name() -> Iterator[str]:
    """A provider name no other test uses; its jobs are cancelled on the way out."""
    name = f"t-{secrets.token_hex(4)}"
    try:
        yield name
    finally:
        cancel_jobs(name)


def cancel_jobs(name: str) -> None:
    provider = SlurmProvider(name)
    ids = [i.id for i in provider.list({TAG_PROVIDER: name})]
    if ids:
        subprocess.run(["scancel", "--signal=KILL", *ids], check=False, capture_output=True)
        subprocess.run(["scancel", *ids], check=False, capture_output=True)


def job_ids(name: str) -> list[str]:
    """The live jobs of provider `name`, as squeue lists them."""
    return sorted(i.id for i in SlurmProvider(name).list())
