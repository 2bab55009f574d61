"""A `lakeshore` read on the embedded plane costs the same at any depth (issue 45, item 4).

At 1,000,000 queued no-ops `lakeshore queues stats` took 0.56 s more than on an empty queue, and
`jobs ls` as much: the first read of a process sweeps the plane (`LocalPlane._swept`), and the
sweep's look for the queue heads workers reserve for (queries.sql, reserved_heads) walked every
queued job in claim order to find the few reason rows, where it should start from those.

Times are measured by hand (the numbers are in the change note); no shared machine could assert
one. This checks the cause instead: each statement a CLI read runs, recorded as the engine
receives it in a real `lakeshore` process at the default settings, is planned by SQLite without
walking the invocations table or one of its indexes. The plan is the same at any depth: with no
statistics (a plane is never ANALYZEd) SQLite plans by the schema alone.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane.queries import SQLITE, queries

#: The reads the issue timed, and the one screen that reads every queue.
READS = [
    ["queues", "stats", "q"],
    ["jobs", "ls", "--queue", "q", "--limit", "20"],
    ["queues", "ls"],
    ["status"],
]
#: The walks of an invocations index that a read may make, each bounded by other than depth:
#: the pending-reason sweep reads the distinct requests of queued jobs through this partial
#: index, which holds only the queued jobs that state a request (a no-op states none).
BOUNDED = {"invocations_shapes"}

#: Runs the console script with every new SQLite connection traced, then prints the statements.
TRACED = """
import json, sqlite3, sys
ran = []
connect = sqlite3.connect
def traced(*args, **kwargs):
    conn = connect(*args, **kwargs)
    conn.set_trace_callback(ran.append)
    return conn
sqlite3.connect = traced
sys.argv = ["lakeshore", *json.loads(sys.argv[1])]
from dreamlake.lakeshore.cli.scripts import lakeshore
try:
    lakeshore()
except SystemExit as exc:
    assert not exc.code, exc.code
print("\\0" + json.dumps(ran))
"""


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A box's plane with a queue of no-ops and a job that states a request."""
    home = tmp_path_factory.mktemp("home")
    with dls.Dispatch(home / "lakeshore.db") as plane:
        q = dls.SyncQueue("q", dispatch=plane)
        q.submit_many([0] * 300)
        q.submit(0, resources={"gpus": 1})
        # The default queue is made by the first listing ever (DESIGN), a write each test
        # would otherwise see only if it ran first in its worker: made here, as on any box
        # that was listed once.
        plane.queues()
    return home


def statements_of(args: list[str], home: Path) -> list[str]:
    """Every statement a `lakeshore` process ran for `args`, with its values bound."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESHORE_")}
    env["LAKESHORE_HOME"] = str(home)  # and no LAKESHORE_PENDING_SWEEP_S: the default cadence
    out = subprocess.run(
        [sys.executable, "-c", TRACED, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=env,
    )
    ran: list[str] = json.loads(out.stdout.rsplit("\0", 1)[1])
    return ran


def walks_of_invocations(conn: sqlite3.Connection, sql: str) -> list[str]:
    """The lines of `sql`'s plan that walk the invocations table or an index of it in full."""
    body = "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
    if not re.match(r"\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\b", body, re.IGNORECASE):
        return []  # BEGIN, PRAGMA, COMMIT: nothing to plan
    names = {"invocations"} | set(re.findall(r"\binvocations\s+(?:AS\s+)?(\w+)", body, re.I))
    walks = []
    for row in conn.execute(f"EXPLAIN QUERY PLAN {body}"):
        step = str(row[3])
        scan = re.match(r"SCAN (\w+)(?: USING (?:COVERING )?INDEX (\w+))?", step)
        if scan and scan[1] in names and scan[2] not in BOUNDED:
            walks.append(step)
    return walks


@pytest.mark.parametrize("args", READS, ids=" ".join)
def test_a_cli_read_walks_no_invocations_index(home: Path, args: list[str]) -> None:
    ran = statements_of(args, home)

    assert any("FROM queues" in sql for sql in ran), "the read was traced"
    with sqlite3.connect(home / "lakeshore.db") as conn:
        walks = {sql.strip()[:300]: w for sql in ran if (w := walks_of_invocations(conn, sql))}
    assert not walks, json.dumps(walks, indent=1)


def test_the_reserved_heads_are_read_from_their_reason_rows(home: Path, tmp_path: Path) -> None:
    # and so after ANALYZE too, which tells SQLite how few the reason rows are
    analyzed = tmp_path / "analyzed.db"
    with sqlite3.connect(home / "lakeshore.db") as conn, sqlite3.connect(analyzed) as copy:
        conn.backup(copy)
    sql = queries(SQLITE)["reserved_heads"]
    for path in (home / "lakeshore.db", analyzed):
        with sqlite3.connect(path) as conn:
            if path == analyzed:
                conn.execute("ANALYZE")
            plan = [str(r[3]) for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}")]
            assert plan[0].startswith("SCAN r"), plan
            assert not walks_of_invocations(conn, sql), plan


@pytest.mark.parametrize("args", READS, ids=" ".join)
def test_a_cli_read_takes_the_write_lock_only_for_the_pending_reasons(
    home: Path, args: list[str]
) -> None:
    # Opening the plane (schema, namespace, default queue) and the lease sweep, with nothing to
    # do, read instead of writing; a fresh process still names pending reasons, once.
    ran = statements_of(args, home)

    begins = [i for i, sql in enumerate(ran) if sql.strip().upper() == "BEGIN IMMEDIATE"]
    assert len(begins) <= 1, [ran[i + 2][:120] for i in begins]
    for i in begins:
        assert "pending_reasons" in " ".join(ran[i : i + 8]) or "workers" in ran[i + 2], ran[i:]
