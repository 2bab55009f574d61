"""`lakeshore schedules` on the embedded plane of a fresh LAKESHORE_HOME (issue 36, item 3):
add, ls (with the next fire time in the schedule's zone), show, pause, resume, rm, --json, and
bad input refused with what is allowed, storing nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dreamlake.lakeshore.cli.main import cli


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("LAKESHORE_HOME", str(tmp_path))
    for var in ("LAKESHORE_URL", "LAKESHORE_TOKEN", "LAKESHORE_NAMESPACE"):
        monkeypatch.delenv(var, raising=False)

    def invoke(*args: str, ok: bool = True) -> str:
        result = CliRunner().invoke(cli, ["schedules", *args])
        assert (result.exit_code == 0) == ok, result.output
        return result.output

    return invoke


def test_add_ls_show_pause_resume_rm(run) -> None:  # type: ignore[no-untyped-def]
    out = run(
        "add",
        "nightly",
        "--cron",
        "0 3 * * *",
        "--tz",
        "Europe/Berlin",
        "--queue",
        "eval",
        "--payload-json",
        '{"suite": "full"}',
    )
    assert out.startswith("schedule nightly: next ") and " 03:00 CE" in out
    table = run("ls").splitlines()
    assert table[0].split() == ["name", "queue", "cron", "next"]  # fits 80 columns
    assert table[1].startswith("nightly") and "03:00 CE" in table[1]
    wide = run("ls", "--wide").splitlines()
    assert wide[0].split()[:6] == ["name", "queue", "cron", "state", "next", "in"]
    assert "Europe/Berlin" in wide[1] and "active" in wide[1]
    (row,) = json.loads(run("ls", "--json"))
    assert (row["name"], row["queue"], row["tz"], row["state"]) == (
        "nightly",
        "eval",
        "Europe/Berlin",
        "active",
    )
    assert row["next_fire_at"].endswith(":00:00.000+00:00")  # ISO 8601 UTC for scripts
    assert "paused" in run("pause", "nightly")
    assert json.loads(run("show", "nightly", "--json"))["state"] == "paused"
    assert "next fire     -" in run("show", "nightly")
    assert "active" in run("resume", "nightly")
    run("rm", "nightly")
    assert json.loads(run("ls", "--json")) == []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--cron", "0 3 * *"], "five fields"),
        (["--cron", "0 3 * * *", "--tz", "Nowhere/Town"], "unknown time zone"),
        (["--cron", "0 3 * * *", "--catchup", "some"], "none, latest, all"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_stored(run, args: list[str], says: str) -> None:  # type: ignore[no-untyped-def]
    out = run("add", "nightly", *args, ok=False)
    assert says in out.replace("'", "")
    assert json.loads(run("ls", "--json")) == []


def test_an_unknown_schedule_is_named(run) -> None:  # type: ignore[no-untyped-def]
    assert "unknown schedule 'nope'" in run("show", "nope", ok=False)
    assert "unknown schedule 'nope'" in run("run-now", "nope", ok=False)


def test_run_now_submits_the_job_and_keeps_the_next_slot(run) -> None:  # type: ignore[no-untyped-def]
    from dreamlake.lakeshore.plane.default import open_plane

    run("add", "nightly", "--cron", "0 3 * * *", "--queue", "eval", "--payload-json", "[1, 2]")
    before = json.loads(run("show", "nightly", "--json"))
    job = run("run-now", "nightly").strip()
    shown = json.loads(run("run-now", "nightly", "--json"))
    assert shown["schedule"] == "nightly" and shown["id"] != job
    after = json.loads(run("show", "nightly", "--json"))
    assert (after["next_fire_at"], after["fired"]) == (before["next_fire_at"], 0)
    plane = open_plane(None, None, None)
    try:
        inv = plane.invocation(job)
        assert inv.queue == "eval" and inv.state == "queued"
        assert inv.key is not None and inv.key.startswith("schedule:nightly:manual:")
    finally:
        plane.close()
