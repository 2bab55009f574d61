"""A job's own token (plane/job_token.py) and what a daemon leaves its jobs (credentials.py).

The token is genuine only for the namespace, invocation, lease and scopes it was minted for,
under the server's key, and opens nothing once that attempt stops running. The daemon's
secrets leave the environment its jobs inherit, and its memory and first environment are
closed to other processes of its user.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.daemon import credentials
from dreamlake.lakeshore.errors import Unauthorized
from dreamlake.lakeshore.plane import job_token
from dreamlake.lakeshore.plane.auth import DEFAULT_SCOPES, JOB, READ, WORK, TokenScope
from dreamlake.lakeshore.plane.dispatch import open_store
from dreamlake.lakeshore.plane.store import SqlStore
from dreamlake.lakeshore.types import Claim, SubmitRequest
from tests.support import claiming

KEY = b"k" * 32


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlStore]:
    """The store a server checks job tokens on, in both dialects."""
    with contextlib.ExitStack() as stack:
        if request.param == "postgres":
            root = str(Path(__file__).resolve().parents[2])
            if root not in sys.path:  # `tests.support` imports however pytest was started
                sys.path.insert(0, root)
            from tests.support.postgres import postgres_schema

            target: str | Path = stack.enter_context(postgres_schema())
        else:
            target = tmp_path / "plane.db"
        sql = open_store(target)
        stack.callback(sql.close)
        sql.signing_key = KEY
        yield sql


def claimed(store: SqlStore, holder: TokenScope, queue: str = "q") -> Claim:
    store.ensure_namespace("ns")
    store.submit("ns", queue, [SubmitRequest(payload=dls.encode(1))])
    got = claiming.store_claim_many(store, "ns", [queue], worker="w", lease_s=60, limit=1)
    (claim,) = job_token.with_job_tokens(KEY, got, holder)
    return claim


def worker(*scopes: str) -> TokenScope:
    return TokenScope("ns", None, "daemon", frozenset(scopes))


def test_a_job_token_opens_its_namespace_with_what_a_job_may_do(store: SqlStore) -> None:
    claim = claimed(store, worker(*DEFAULT_SCOPES))
    assert claim.job_token is not None

    scope = store.token_scope(claim.job_token)

    assert (scope.namespace, scope.org) == ("ns", None)  # not the org's siblings
    assert scope.scopes == {JOB, "read", "submit-data", "submit-code"}
    assert not scope.allows(WORK) and not scope.allows("manage") and not scope.admin


def test_a_job_token_holds_no_more_than_the_token_that_claimed_its_job(store: SqlStore) -> None:
    assert store.token_scope(claimed(store, worker(WORK)).job_token or "").scopes == {JOB}
    read_only = claimed(store, worker(WORK, READ), queue="r").job_token or ""
    assert store.token_scope(read_only).scopes == {JOB, READ}


def test_a_job_token_dies_with_its_attempt(store: SqlStore) -> None:
    claim = claimed(store, worker(*DEFAULT_SCOPES))
    token = claim.job_token or ""
    store.token_scope(token)

    store.ack(claim.id, claim.lease, None)

    with pytest.raises(Unauthorized, match="its job's attempt has ended"):
        store.token_scope(token)


def test_a_released_attempts_token_stays_dead_when_the_job_is_claimed_again(
    store: SqlStore,
) -> None:
    first = claimed(store, worker(*DEFAULT_SCOPES))
    store.release(first.id, first.lease)  # back to the queue, the same attempt number
    (again,) = claiming.store_claim_many(store, "ns", ["q"], worker="w2", lease_s=60, limit=1)
    assert again.attempt == first.attempt

    with pytest.raises(Unauthorized):
        store.token_scope(first.job_token or "")


def forgeries(token: str) -> list[str]:
    inv_id, scopes, mac = token.removeprefix(job_token.PREFIX).rsplit(".", 2)
    other = "A" if mac[0] != "A" else "B"
    return [
        f"{job_token.PREFIX}{inv_id}.job+read+submit-data+submit-code.{mac}",  # scopes raised
        f"{job_token.PREFIX}{inv_id}.job.{mac}",  # scopes changed
        f"{job_token.PREFIX}{inv_id}.{scopes}.{other}{mac[1:]}",  # the MAC guessed
        f"{job_token.PREFIX}{inv_id}.{scopes}.",
        f"{job_token.PREFIX}{inv_id}.read.{mac}",  # no job scope
        f"{job_token.PREFIX}{inv_id}.job+work.{mac}",  # a scope a job never inherits
        f"{job_token.PREFIX}{inv_id}",
        f"{job_token.PREFIX}01NOSUCHJOB.{scopes}.{mac}",
    ]


def test_a_forged_or_altered_job_token_opens_nothing(store: SqlStore) -> None:
    claim = claimed(store, worker(WORK, READ))
    token = claim.job_token or ""

    for forged in forgeries(token):
        with pytest.raises(Unauthorized, match="unknown job token"):
            store.token_scope(forged)
    # the same job and lease under another server's key
    (elsewhere,) = job_token.with_job_tokens(b"x" * 32, [claim], worker(WORK, READ))
    with pytest.raises(Unauthorized):
        store.token_scope(elsewhere.job_token or "")
    # a server with no signing key honours no job token
    store.signing_key = None
    with pytest.raises(Unauthorized):
        store.token_scope(token)


def test_the_daemons_secrets_leave_its_environment_and_nothing_else_does() -> None:
    env = {
        "LAKESHORE_TOKEN": "lks_daemon",
        "LAKESHORE_TOKEN_FILE": "/etc/lakeshore/worker.token",
        "LAKESHORE_CONTROLLER_PLANE_TOKEN": "lks_plane",
        "LAKESHORE_SIGNING_KEY": "ab" * 32,
        "LAKESHORE_DAEMON_SIGNING_KEY_FILE": "/etc/lakeshore/signing.key",
        "LAKESHORE_URL": "http://cp:8765",
        "LAKESHORE_NAMESPACE": "ns",
        "CUDA_VISIBLE_DEVICES": "0",
        "AWS_SECRET_ACCESS_KEY": "the job's storage needs it",
    }

    removed = credentials.seal_process(env)

    assert removed == [
        "LAKESHORE_CONTROLLER_PLANE_TOKEN",
        "LAKESHORE_DAEMON_SIGNING_KEY_FILE",
        "LAKESHORE_SIGNING_KEY",
        "LAKESHORE_TOKEN",
        "LAKESHORE_TOKEN_FILE",
    ]
    assert set(env) == {
        "LAKESHORE_URL",
        "LAKESHORE_NAMESPACE",
        "CUDA_VISIBLE_DEVICES",
        "AWS_SECRET_ACCESS_KEY",
    }


def test_a_job_holds_its_token_while_it_runs_and_no_plane_of_it_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dreamlake.lakeshore.plane import default

    monkeypatch.setenv("LAKESHORE_URL", "http://127.0.0.1:9")
    monkeypatch.delenv("LAKESHORE_TOKEN", raising=False)
    with credentials.job_credentials("lksj_one.job.mac"):
        assert os.environ["LAKESHORE_TOKEN"] == "lksj_one.job.mac"
        plane = default.default_plane()  # connects to nothing until asked
        assert plane._client.headers["authorization"] == "Bearer lksj_one.job.mac"  # type: ignore[attr-defined]
    assert "LAKESHORE_TOKEN" not in os.environ
    assert default._planes == {}
    with credentials.job_credentials(None):
        assert "LAKESHORE_TOKEN" not in os.environ


# A daemon that holds a secret in its first environment, and a job of the same (ordinary) user
# that reads /proc/<daemon>/environ. As root the probe first becomes `nobody`: root reads every
# process's memory whatever the process does.
PROBE = textwrap.dedent(
    """
    import ctypes, os, pwd, subprocess, sys
    from dreamlake.lakeshore.daemon.credentials import not_dumpable
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.setgroups([])
        os.setgid(nobody.pw_gid)
        os.setuid(nobody.pw_uid)
        ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # dumpable, as a process that never changed uid
    if sys.argv[1] == "sealed":
        assert not_dumpable()
    job = subprocess.run(["cat", f"/proc/{os.getpid()}/environ"], capture_output=True)
    print("read" if b"lks_in-the-first-environment" in job.stdout else "refused")
    """
)


@pytest.mark.parametrize(("how", "seen"), [("sealed", "refused"), ("open", "read")])
def test_a_sealed_daemons_first_environment_is_closed_to_its_jobs(how: str, seen: str) -> None:
    env = {**os.environ, "LAKESHORE_TOKEN": "lks_in-the-first-environment"}
    run = subprocess.run(
        [sys.executable, "-c", PROBE, how],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )

    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == seen
