"""`lakeshore status`: the one-screen overview, on the embedded plane of a temporary home.

The oldest-age search is checked on a fake listing whose ids carry chosen submit times (ULIDs
encode them), so a job hours old needs no hours of waiting; the rest runs the real command.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from ulid import ULID

from dreamlake.lakeshore.cli.main import cli
from dreamlake.lakeshore.cli.status import OLDEST_PRECISION, oldest_queued_age
from dreamlake.lakeshore.plane.default import open_plane
from dreamlake.lakeshore.plane.dispatch import open_store
from dreamlake.lakeshore.queue import SyncQueue
from tests.support import claiming

NOW = 1_800_000_000.0


@dataclass
class Row:
    id: str
    created_at: float


class QueuedListing:
    """Only what the search reads: queued rows of one queue, newest first, paged by id."""

    def __init__(self, ages: list[float]) -> None:
        self.rows = sorted(
            (Row(str(ULID.from_timestamp(NOW - a)), NOW - a) for a in ages),
            key=lambda r: r.id,
            reverse=True,
        )
        self.reads = 0

    def invocations(
        self, *, queue: str, state: str, limit: int, before: str | None = None
    ) -> list[Row]:
        self.reads += 1
        assert state == "queued"
        return [r for r in self.rows if before is None or r.id < before][:limit]


@pytest.mark.parametrize("ages", [[5.0], [3600.0, 100.0, 5.0], [9 * 86400.0, 0.2], [0.3, 0.1]])
def test_oldest_queued_age_is_found_within_its_precision_in_few_reads(ages):
    listing = QueuedListing(ages)
    found = oldest_queued_age(listing, "q", NOW)  # type: ignore[arg-type]
    assert found is not None
    assert max(ages) / OLDEST_PRECISION - 0.01 <= found <= max(ages) + 0.01
    assert listing.reads <= 40


def test_a_job_whose_id_is_older_than_its_row_ends_the_search():
    """A producer mints the id before the plane stamps created_at (over HTTP, a request's
    latency; under load, more): with the search's bound between the two, a row reported by
    created_at alone was found again and again and `lakeshore status` spun forever."""
    listing = QueuedListing([1.95])
    late = listing.rows[0]
    listing.rows[0] = Row(str(ULID.from_timestamp(NOW - 2.05)), late.created_at)
    found = oldest_queued_age(listing, "q", NOW)  # type: ignore[arg-type]
    assert found is not None and 1.95 <= found <= 2.05 * OLDEST_PRECISION
    assert listing.reads <= 40


def test_oldest_queued_age_of_an_empty_queue_is_none():
    assert oldest_queued_age(QueuedListing([]), "q", NOW) is None  # type: ignore[arg-type]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key in ("LAKESHORE_URL", "LAKESHORE_TOKEN", "LAKESHORE_NAMESPACE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("LAKESHORE_HOME", str(tmp_path))
    plane = open_plane(None, None, None)
    try:
        plane.create_queue("train", elasticity={"kind": "fixed", "max": 2})
        q = SyncQueue("train", dispatch=plane)
        for i in range(3):
            q.submit({"i": i})
        worker = plane.register_worker(
            "gpu-box-1", queues=["train"], host="gpu-box", info={"concurrency": 2, "gpus": [{}]}
        )
        plane.heartbeat(worker.id, {"busy": 1, "idle": 1})
    finally:
        plane.close()
    store = open_store(tmp_path / "lakeshore.db")
    try:  # what the controller records for a decision
        store.record_event(
            "default", "train", "scaled", {"desired": 2, "current": 1, "reason": "backlog 3"}
        )
    finally:
        store.close()
    return tmp_path


def test_status_json_has_queues_daemons_and_decisions(home):
    result = CliRunner().invoke(cli, ["status", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    snap = json.loads(result.output)
    train = next(q for q in snap["queues"] if q["name"] == "train")
    assert (train["depth"], train["running"], train["daemons"], train["slots"]) == (3, 0, 1, 2)
    assert train["oldest_age_s"] is not None and train["oldest_age_s"] >= 0
    assert train["rate_per_s"] == 0
    (daemon,) = snap["daemons"]
    assert (daemon["name"], daemon["slots"], daemon["busy"], daemon["gpus"]) == (
        "gpu-box-1",
        2,
        1,
        1,
    )
    assert daemon["heartbeat_at"].endswith("+00:00")  # ISO in JSON, not epoch seconds
    (decision,) = snap["decisions"]
    assert decision["queue"] == "train" and decision["desired"] == 2
    assert decision["reason"] == "backlog 3" and "T" in decision["at"]


def test_status_table_shows_ages_not_epochs(home):
    result = CliRunner().invoke(cli, ["status"], catch_exceptions=False, terminal_width=200)
    assert result.exit_code == 0, result.output
    for text in ("train", "gpu-box-1", "1/2", "scaled", "1 -> 2", "backlog 3", "ago"):
        assert text in result.output
    assert not any(len(word) >= 10 and word.isdigit() for word in result.output.split())


def test_status_watch_json_prints_one_line_per_refresh(home):
    args = ["status", "--watch", "--json", "--count", "3", "--interval-s", "0.1"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 3
    assert all(json.loads(line)["namespace"] == "default" for line in lines)


def test_status_watch_redraws_the_tables(home):
    args = ["status", "--watch", "--count", "2", "--interval-s", "0.1"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False, terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "gpu-box-1" in result.output and "train" in result.output


def test_status_shows_the_progress_of_a_map_in_flight(home):
    """Issue 36: a map's jobs, by how they ended, under the queue they run on."""
    from dataclasses import replace

    from ulid import ULID

    from dreamlake.lakeshore.types import Ack

    map_id = str(ULID())
    plane = open_plane(None, None, None)
    try:
        q = SyncQueue("train", dispatch=plane)
        reqs = [replace(q._request(payload={"item": i}), map_id=map_id) for i in range(4)]
        ids = set(plane.submit("train", reqs))
        # the fixture's three jobs are older: five claims take them and two of the map's
        claimed = [
            c for c in claiming.claim_many(plane, ["train"], worker="w", limit=5) if c.id in ids
        ]
        assert len(claimed) == 2
        plane.ack_many([Ack(claimed[0].id, claimed[0].lease, None)])
    finally:
        plane.close()
    result = CliRunner().invoke(cli, ["status", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    train = next(q for q in json.loads(result.output)["queues"] if q["name"] == "train")
    (progress,) = train["maps"]
    assert progress["map_id"] == map_id and progress["jobs"] == 4
    assert progress["states"] == {"succeeded": 1, "running": 1, "queued": 2}
    shown = CliRunner().invoke(cli, ["status"], catch_exceptions=False, terminal_width=200)
    assert map_id in shown.output and "1/4" in shown.output


def test_status_lists_the_schedules_when_there_are_any(home, monkeypatch):
    """Issue 36 item 6: each schedule's next and last firing, missed slots, paused or not."""
    monkeypatch.setenv("COLUMNS", "200")  # rich's width off a terminal: no cell wraps
    from dreamlake.lakeshore.scheduling import schedule

    before = CliRunner().invoke(cli, ["status", "--json"], catch_exceptions=False)
    assert json.loads(before.output)["schedules"] == []
    bare = CliRunner().invoke(cli, ["status"], catch_exceptions=False, terminal_width=200)
    assert "schedules" not in bare.output
    plane = open_plane(None, None, None)
    try:
        q = SyncQueue("train", dispatch=plane)
        schedule("nightly", "0 3 * * *", queue=q, payload={"suite": "full"}, tz="Europe/Berlin")
        schedule("hourly", "0 * * * *", queue=q, payload=1)
        plane.set_schedule_state("hourly", "pause")
    finally:
        plane.close()
    result = CliRunner().invoke(cli, ["status", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = {s["name"]: s for s in json.loads(result.output)["schedules"]}
    nightly, hourly = rows["nightly"], rows["hourly"]
    assert (nightly["queue"], nightly["tz"], nightly["paused"], nightly["missed"]) == (
        "train",
        "Europe/Berlin",
        False,
        0,
    )
    assert nightly["next_fire_at"].endswith("+00:00") and nightly["last_fired_at"] is None
    assert hourly["paused"] is True and hourly["next_fire_at"] is None
    shown = CliRunner().invoke(cli, ["status", "--wide"], catch_exceptions=False)
    table = shown.output[shown.output.index("schedules") :]
    for text in ("next fire", "last fired", "missed", "paused", "nightly", "hourly"):
        assert text in table
    nightly_line = next(line for line in table.splitlines() if "nightly" in line)
    assert "03:00 CE" in nightly_line and "(in " in nightly_line and "no" in nightly_line
    hourly_line = next(line for line in table.splitlines() if "hourly" in line)
    assert "yes" in hourly_line
