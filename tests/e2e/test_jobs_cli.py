"""`lakeshore jobs` and `lakeshore submit` against a real server.

The test itself plays the worker through an `HttpDispatch` (claim, post, ack / nack / end), so
each verb is checked against a known sequence of states without a daemon's timing in the way.
Commands that wait (`submit --wait`, `logs --follow`) run as real subprocesses, and every wait
in the test is a deadline (a long-poll claim, `communicate(timeout=...)`), never a sleep.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

import pytest
from click.testing import CliRunner, Result

from dreamlake.lakeshore import codec
from dreamlake.lakeshore.cli.main import cli
from dreamlake.lakeshore.plane import HttpDispatch
from dreamlake.lakeshore.types import Claim
from tests.support import claiming
from tests.support.server import LAUNCH

DEADLINE_S = 30.0


@pytest.fixture
def cli_env(server, tenant, tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESHORE_")}
    env.update(
        LAKESHORE_URL=server.url,
        LAKESHORE_TOKEN=tenant.token,
        LAKESHORE_NAMESPACE=tenant.namespace,
        LAKESHORE_HOME=str(tmp_path),
    )
    return env


@pytest.fixture
def run(cli_env) -> Callable[..., Result]:
    """The command in-process (CliRunner): quick, with its exit code and output."""
    runner = CliRunner()

    def invoke(*args: str, code: int | None = 0) -> Result:
        result = runner.invoke(cli, list(args), env=cli_env, catch_exceptions=False)
        if code is not None:
            assert result.exit_code == code, (result.exit_code, result.output)
        return result

    return invoke


@pytest.fixture
def worker(server, tenant) -> HttpDispatch:
    plane = HttpDispatch(server.url, token=tenant.token, namespace=tenant.namespace)
    yield plane
    plane.close()


def spawn(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", LAUNCH, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def claim(plane: HttpDispatch, queue: str) -> Claim:
    got = claiming.claim(plane, [queue], worker="test-worker", wait_s=DEADLINE_S)
    assert got is not None, f"nothing to claim on {queue} within {DEADLINE_S}s"
    return got


def test_submit_prints_an_id_and_ls_show_it(run, worker):
    inv = run("submit", "prep", "--payload-json", '{"lr": 0.1}', "--key", "k1", "--priority", "5")
    inv_id = inv.output.strip()
    again = run("submit", "prep", "--payload-json", '{"lr": 0.1}', "--key", "k1").output.strip()
    assert again == inv_id  # the same key is the same job
    other = run("submit", "eval", "--payload-json", "[1, 2, 3]").output.strip()

    rows = json.loads(run("jobs", "ls", "--json").output)
    assert [r["id"] for r in rows] == [other, inv_id]  # newest first
    assert json.loads(run("jobs", "ls", "--queue", "prep", "--json").output)[0]["id"] == inv_id
    assert json.loads(run("jobs", "ls", "--state", "running", "--json").output) == []
    assert len(json.loads(run("jobs", "ls", "--limit", "1", "--json").output)) == 1
    older = json.loads(run("jobs", "ls", "--before", other, "--json").output)
    assert [r["id"] for r in older] == [inv_id]

    table = run("jobs", "ls").output
    assert inv_id in table and other in table and "queued" in table

    shown = json.loads(run("jobs", "show", inv_id, "--json").output)
    assert shown["state"] == "queued" and shown["priority"] == 5.0 and shown["key"] == "k1"
    assert codec.decode(claim(worker, "prep").payload) == {"lr": 0.1}

    text = run("jobs", "show", inv_id).output
    assert "running" in text and "test-worker" in text and "1 of 3" in text


def test_show_names_the_error_with_its_traceback(run, worker):
    inv_id = run("submit", "boom", "--payload-json", "{}").output.strip()
    job = claim(worker, "boom")
    trace = 'Traceback (most recent call last):\n  File "job.py", line 3\nValueError: bad input'
    assert worker.nack(job.id, job.lease, error=trace, retry=False) == "failed"
    text = run("jobs", "show", inv_id).output
    assert "failed" in text and "ValueError: bad input" in text and "job.py" in text
    row = json.loads(run("jobs", "ls", "--state", "failed", "--json").output)[0]
    assert row["id"] == inv_id and row["error"] == trace
    # the wide table shows a traceback's exception line, not its "Traceback" header
    assert "ValueError: bad input" in run("jobs", "ls", "--wide").output


def test_cancel_then_kill_then_retry(run, worker):
    queued = run("submit", "ops", "--payload-json", "1").output.strip()
    assert json.loads(run("jobs", "cancel", queued, "--json").output)["state"] == "cancelled"
    refused = run("jobs", "cancel", queued, code=1)
    assert "already cancelled" in refused.output
    assert "submit it again" in run("jobs", "retry", queued, code=1).output

    running = run("submit", "ops", "--payload-json", "2").output.strip()
    job = claim(worker, "ops")
    assert "--kill" in run("jobs", "cancel", running, code=1).output  # running: needs --kill
    assert "kill requested" in run("jobs", "cancel", running, "--kill").output
    assert worker.renew([job.lease], 60.0) == {running: True}  # the daemon learns of the kill
    worker.end(running, job.lease, state="killed", error="killed by request")
    assert worker.invocation(running).state == "killed"

    retried = json.loads(run("jobs", "retry", running, "--json").output)
    assert retried["state"] == "queued" and retried["kill_requested"] is False
    again = claim(worker, "ops")
    assert again.id == running and again.attempt == 2
    worker.ack(running, again.lease, codec.encode("done"))
    shown = json.loads(run("jobs", "show", running, "--json").output)
    assert shown["state"] == "succeeded" and shown["result"] == "done"
    assert "succeeded" in run("jobs", "retry", running, code=1).output


def test_retry_of_a_spent_job_gets_one_more_attempt_and_a_fresh_journal(run, worker):
    inv_id = run("submit", "spent", "--payload-json", "0", "--max-attempts", "1").output.strip()
    job = claim(worker, "spent")
    worker.post(inv_id, "VALUE", codec.encode("first try"), lease=job.lease)
    worker.nack(inv_id, job.lease, error="ran out", retry=True)  # no attempts left: failed
    assert worker.invocation(inv_id).state == "failed"
    run("jobs", "retry", inv_id)
    job = claim(worker, "spent")
    assert (job.attempt, worker.invocation(inv_id).max_attempts) == (2, 2)
    worker.post(inv_id, "VALUE", codec.encode("second try"), lease=job.lease)
    worker.ack(inv_id, job.lease, None)
    assert run("jobs", "logs", inv_id).output.splitlines() == ["second try"]


def test_submit_wait_exit_codes_name_the_outcome(cli_env, worker):
    ok = spawn(cli_env, "submit", "waited", "--payload-json", '{"x": 2}', "--wait")
    job = claim(worker, "waited")
    worker.ack(job.id, job.lease, codec.encode({"y": 4}))
    out, err = ok.communicate(timeout=DEADLINE_S)
    assert ok.returncode == 0, err
    expected = {"id": job.id, "state": "succeeded", "result": {"y": 4}, "error": None}
    assert json.loads(out) == expected
    assert "running" in err or "succeeded" in err  # progress went to stderr

    bad = spawn(cli_env, "submit", "waited", "--payload-json", "{}", "--wait")
    job = claim(worker, "waited")
    worker.nack(job.id, job.lease, error="ValueError: no", retry=False)
    out, err = bad.communicate(timeout=DEADLINE_S)
    assert bad.returncode == 10, err
    assert json.loads(out)["state"] == "failed" and "ValueError: no" in err

    slow = spawn(
        cli_env, "submit", "idle-q", "--payload-json", "{}", "--wait", "--wait-timeout-s", "0.5"
    )
    out, err = slow.communicate(timeout=DEADLINE_S)
    assert slow.returncode == 124 and json.loads(out)["state"] == "queued"


def test_submit_reads_stdin_and_files_and_refuses_bad_json(run, worker, tmp_path, cli_env):
    path = tmp_path / "payload.json"
    path.write_text('{"from": "file"}')
    run("submit", "src", "--payload-json", f"@{path}")
    assert codec.decode(claim(worker, "src").payload) == {"from": "file"}
    piped = subprocess.run(
        [sys.executable, "-c", LAUNCH, "submit", "src", "--payload-json", "-"],
        input='["from", "stdin"]',
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert piped.returncode == 0, piped.stderr
    assert codec.decode(claim(worker, "src").payload) == ["from", "stdin"]
    assert "not valid JSON" in run("submit", "src", "--payload-json", "{nope", code=2).output


def test_logs_follow_streams_frames_and_exits_with_the_state(cli_env, run, worker):
    inv_id = run("submit", "logs-q", "--payload-json", "{}").output.strip()
    job = claim(worker, "logs-q")
    follower = spawn(cli_env, "jobs", "logs", inv_id, "--follow")
    for line in ("epoch 1", "epoch 2"):
        worker.post(inv_id, "VALUE", codec.encode(line), lease=job.lease)
    worker.post(inv_id, "VALUE", codec.encode({"loss": 0.5}), lease=job.lease)
    worker.nack(inv_id, job.lease, error="diverged", retry=False)
    out, err = follower.communicate(timeout=DEADLINE_S)
    assert follower.returncode == 10, err
    assert out.splitlines() == ["epoch 1", "epoch 2", '{"loss": 0.5}']
    assert "ERROR diverged" in err

    # resumable: --since the last seq a reader saw; --json gives that seq
    frames = [json.loads(x) for x in run("jobs", "logs", inv_id, "--json").output.splitlines()]
    assert [f["seq"] for f in frames] == [0, 1, 2, 3] and frames[3]["kind"] == "ERROR"
    resumed = run("jobs", "logs", inv_id, "--since", "1").stdout.splitlines()
    assert resumed == ['{"loss": 0.5}']


def test_follow_of_a_succeeded_job_exits_zero(run, worker):
    inv_id = run("submit", "fine", "--payload-json", "{}").output.strip()
    job = claim(worker, "fine")
    worker.post(inv_id, "VALUE", codec.encode("only line"), lease=job.lease)
    worker.ack(inv_id, job.lease, None)
    assert run("jobs", "logs", inv_id, "-f").output.splitlines() == ["only line"]


def test_unknown_id_is_one_line_and_exit_1(run):
    result = run("jobs", "show", "01ARZ3NDEKTSV4RRFFQ69G5FAV", code=1)
    assert "NotFound" in result.output and "Traceback" not in result.output


def test_jobs_on_the_embedded_plane(tmp_path):
    env = {"LAKESHORE_HOME": str(tmp_path), "LAKESHORE_URL": "", "LAKESHORE_TOKEN": ""}
    runner = CliRunner()
    submitted = runner.invoke(cli, ["submit", "local", "--payload-json", "7"], env=env)
    assert submitted.exit_code == 0, submitted.output
    listed = runner.invoke(cli, ["jobs", "ls", "--json"], env=env)
    assert json.loads(listed.output)[0]["id"] == submitted.output.strip()


def test_submit_after_waits_and_jobs_show_ls_and_cancel_name_it(run, worker):
    # issue 36 item 4: --after (repeatable) holds the job as waiting; show names its parents
    first = run("submit", "prep", "--payload-json", "1").output.strip()
    second = run("submit", "prep2", "--payload-json", "2").output.strip()
    child = run(
        "submit", "train", "--payload-json", "3", "--after", first, "--after", second
    ).output.strip()
    rows = json.loads(run("jobs", "ls", "--state", "waiting", "--json").output)
    assert [r["id"] for r in rows] == [child]
    shown = json.loads(run("jobs", "show", child, "--json").output)
    assert shown["state"] == "waiting" and shown["after"] == sorted([first, second])
    assert shown["waiting_on"] == 2
    text = run("jobs", "show", child).output
    assert "waiting" in text and first in text and "waiting on 2" in text
    job = claim(worker, "prep")
    worker.ack(job.id, job.lease, None)
    assert json.loads(run("jobs", "show", child, "--json").output)["waiting_on"] == 1
    assert json.loads(run("jobs", "cancel", second, "--json").output)["state"] == "cancelled"
    gone = json.loads(run("jobs", "show", child, "--json").output)
    assert gone["state"] == "cancelled" and f"parent {second} ended cancelled" in gone["error"]
    refused = run(
        "submit", "train", "--payload-json", "4", "--after", "01J0000000000000000000000Z", code=1
    )
    assert "unknown parent invocation" in refused.output
