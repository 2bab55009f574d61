"""`lakeshore submit --delay-s S` / `--at TIME` (issue 36 items 2 and 6) on the embedded plane of
a fresh LAKESHORE_HOME: the job is stored as `scheduled` until due, `--at` reads ISO 8601 (any
zone; none is UTC) or epoch seconds as the SDK's `at=` does, and bad input is refused naming the
option, with nothing stored."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from dreamlake.lakeshore.cli.main import cli
from dreamlake.lakeshore.cli.params import Moment


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    monkeypatch.setenv("LAKESHORE_HOME", str(tmp_path))
    for var in ("LAKESHORE_URL", "LAKESHORE_TOKEN", "LAKESHORE_NAMESPACE"):
        monkeypatch.delenv(var, raising=False)

    def invoke(*args: str, code: int = 0) -> Result:
        result = CliRunner().invoke(cli, list(args))
        assert result.exit_code == code, result.output
        return result

    return invoke


def state(run: Callable[..., Result], inv_id: str) -> str:
    return str(json.loads(run("jobs", "show", inv_id, "--json").output)["state"])


def test_delay_and_at_store_a_scheduled_job(run: Callable[..., Result]) -> None:
    delayed = run("submit", "crunch", "--payload-json", "1", "--delay-s", "3600").output.strip()
    assert state(run, delayed) == "scheduled"
    when = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=2)).astimezone(
        dt.timezone(dt.timedelta(hours=5, minutes=30))
    )
    at_iso = run("submit", "crunch", "--payload-json", "2", "--at", when.isoformat()).output
    assert state(run, at_iso.strip()) == "scheduled"
    past = run("submit", "crunch", "--payload-json", "3", "--at", "1600000000").output.strip()
    assert state(run, past) == "queued"  # already due: claimable at once
    rows = json.loads(run("jobs", "ls", "--state", "scheduled", "--json").output)
    assert sorted(r["id"] for r in rows) == sorted([delayed, at_iso.strip()])


def test_at_reads_iso_8601_as_the_sdk_reads_a_datetime() -> None:
    moment = Moment()
    utc = dt.datetime(2030, 1, 1, 3, tzinfo=dt.timezone.utc).timestamp()
    assert moment.convert("2030-01-01T03:00:00Z", None, None) == utc
    assert moment.convert("2030-01-01T03:00:00", None, None) == utc  # no zone: UTC, not local
    assert moment.convert("2030-01-01T04:00:00+01:00", None, None) == utc
    assert moment.convert(str(utc), None, None) == utc


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--at", "tomorrow"), "epoch seconds or an ISO 8601 time"),
        (("--at", "nan"), "epoch seconds or an ISO 8601 time"),
        (("--delay-s", "-1"), "--delay-s"),
        (("--delay-s", "5", "--at", "1600000000"), "give --delay-s or --at, not both"),
    ],
)
def test_bad_times_are_refused_and_store_nothing(
    run: Callable[..., Result], args: tuple[str, ...], message: str
) -> None:
    refused = run("submit", "crunch", "--payload-json", "1", *args, code=2)
    assert message in refused.output
    assert json.loads(run("jobs", "ls", "--json").output) == []
