"""Every table the CLI prints reads whole at 80 columns (issue 45, item 6).

The plane is a real one (the embedded SQLite plane of a temporary home) holding what a fleet
holds: a queue named `training-h100`, ULID ids, a daemon named after its host, a failed job with
a long error, a map in flight, cron schedules, a controller decision, a provider and a token.
Each listing runs as a real `lakeshore` process twice: with its stdout a pipe, as CI sees it
(no COLUMNS: 80 is assumed), and on a pseudo-terminal 80 columns wide. No line may be longer,
no header or cell cut with an ellipsis, no two columns titled alike; `--wide` shows every
column and `--json` everything.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from ulid import ULID

from dreamlake.lakeshore.cli import daemon as daemon_cli
from dreamlake.lakeshore.cli import jobs as jobs_cli
from dreamlake.lakeshore.cli import queues as queues_cli
from dreamlake.lakeshore.cli import schedules as schedules_cli
from dreamlake.lakeshore.cli import status as status_cli
from dreamlake.lakeshore.cli import tokens as tokens_cli
from dreamlake.lakeshore.plane.default import open_plane
from dreamlake.lakeshore.plane.dispatch import open_store
from dreamlake.lakeshore.queue import SyncQueue
from dreamlake.lakeshore.scheduling import schedule
from dreamlake.lakeshore.types import Ack
from tests.support import claiming

LAKESHORE = str(Path(sys.executable).parent / "lakeshore")
DEADLINE_S = 60.0
QUEUE = "training-h100"
HOST = "gpu-node-017.train.example.com"
WORKER = "gpu-node-017-48213"  # as a daemon names itself: <hostname>-<pid>
ERROR = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 79.15 GiB "
    "total capacity; 61.02 GiB already allocated)"
)
REASON = (
    "6 job(s) asking 24 GPU(s) packed onto 8 x H100 (80 GB) -> 3 daemon(s); 3 job(s) no such "
    "daemon could run left out"
)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Fleet:
    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.home, self.env = home, env
        self.ids: list[str] = []
        self.map_id = str(ULID())


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    home = tmp_path_factory.mktemp("tables")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESHORE_")}
    env.pop("COLUMNS", None)
    env["LAKESHORE_HOME"] = str(home)
    saved = {k: os.environ.get(k) for k in ("LAKESHORE_HOME", "LAKESHORE_URL")}
    os.environ["LAKESHORE_HOME"] = str(home)
    os.environ.pop("LAKESHORE_URL", None)
    out = Fleet(home, env)
    try:
        _fill(out)
        yield out
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _fill(fleet: Fleet) -> None:
    plane = open_plane(None, None, None)
    try:
        plane.create_queue(
            QUEUE,
            elasticity={"kind": "fixed", "max": 4},
            description="nightly evals of the 70B checkpoints on the H100 pool, owned by the "
            "training team; ask in #ml-infra before draining it",
        )
        plane.create_queue("eval-a100-spot")
        q = SyncQueue(QUEUE, dispatch=plane)
        fleet.ids = [q.submit({"step": i}) for i in range(6)]
        reqs = [replace(q._request(payload={"item": i}), map_id=fleet.map_id) for i in range(4)]
        fleet.ids += plane.submit(QUEUE, reqs)
        claims = claiming.claim_many(plane, [QUEUE], worker=WORKER, limit=3)
        plane.ack_many([Ack(claims[0].id, claims[0].lease, None)])
        plane.nack(claims[1].id, claims[1].lease, error=ERROR, retry=False)
        worker = plane.register_worker(
            WORKER,
            queues=[QUEUE, "eval-a100-spot"],
            host=HOST,
            info={"concurrency": 8, "gpus": [_gpu(i) for i in range(8)]},
        )
        slot = {"index": 0, "state": "running", "invocation": claims[2].id, "queue": QUEUE}
        plane.heartbeat(
            worker.id,
            {
                "busy": 1,
                "idle": 7,
                "cpu_percent": 37.5,
                "memory_percent": 41.2,
                "slots": [
                    {
                        **slot,
                        "attempt": 1,
                        "since": time.time() - 3600,
                        "gpus": [0, 1],
                        "pid": 48213,
                    }
                ],
                "gpus_failed": [{"index": 7, "reason": "NVML: GPU is lost (Xid 79)"}],
            },
        )
        schedule(
            "nightly-eval-70b",
            "30 2 * * 1-5",
            queue=q,
            payload={"suite": "full"},
            tz="America/Los_Angeles",
        )
        schedule("hourly-metrics-rollup", "*/15 9-17 * * 1-5", queue=q, payload=1)
        plane.set_schedule_state("hourly-metrics-rollup", "pause")
    finally:
        plane.close()
    store = open_store(fleet.home / "lakeshore.db")
    try:
        store.record_event(
            "default", QUEUE, "scaled", {"desired": 3, "current": 1, "reason": REASON}
        )
        store.add_provider(
            "default",
            "h100-pool",
            "fake",
            {"shape": {"gpus": 8, "gpu_type": "H100", "gpu_memory_gb": 80}, "region": "us-east-1"},
        )
    finally:
        store.close()
    created = subprocess.run(
        [
            *(LAKESHORE, "tokens", "create", "-n", "default"),
            *("--label", "ci-producer-training-h100", "--expires-in", "30d"),
            *("--scope", "submit-data", "--scope", "read"),
        ],
        env=fleet.env,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert created.returncode == 0, created.stderr


def _gpu(index: int) -> dict[str, object]:
    """A GPU as the daemon's inventory reports it (NVML)."""
    uuid = f"GPU-5f1c0a8e-3b1d-4c7e-9a2f-0d6b8e4c1a{index:02d}"
    return {"index": index, "name": "NVIDIA H100 80GB HBM3", "memory_mb": 81559, "uuid": uuid}


def _piped(fleet: Fleet, *args: str) -> str:
    """The verb as CI runs it: stdout a pipe, no COLUMNS."""
    done = subprocess.run(
        [LAKESHORE, *args], env=fleet.env, capture_output=True, text=True, timeout=DEADLINE_S
    )
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def _on_terminal(fleet: Fleet, *args: str, columns: int = 80) -> str:
    """The verb on a pseudo-terminal `columns` wide, as a person runs it (escapes stripped)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    proc = subprocess.Popen(
        [LAKESHORE, *args], env=fleet.env, stdin=slave, stdout=slave, stderr=subprocess.PIPE
    )
    os.close(slave)
    chunks: list[bytes] = []
    try:
        while True:
            ready, _, _ = select.select([master], [], [], DEADLINE_S)
            assert ready, f"{args}: no output within {DEADLINE_S}s"
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the process closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(master)
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
        proc.stderr.close()
        code = proc.wait(timeout=DEADLINE_S)
    assert code == 0, (args, err)
    text = b"".join(chunks).decode().replace("\r\n", "\n")
    return ANSI.sub("", text)


def _assert_fits(text: str, args: tuple[str, ...]) -> None:
    assert text.strip(), args
    assert "…" not in text and "..." not in text, (args, text)
    for line in text.splitlines():
        assert len(line) <= 80, (args, len(line), line)


LISTINGS = [
    ("status",),
    ("jobs", "ls"),
    ("jobs", "ls", "--state", "failed"),
    ("daemon", "ls"),
    ("daemon", "show", WORKER),
    ("queues", "ls"),
    ("queues", "show", QUEUE),
    ("queues", "events", QUEUE, "-v"),
    ("schedules", "ls"),
    ("providers", "ls"),
    ("tokens", "ls"),
    ("namespaces", "ls"),
    ("namespaces", "orgs"),
]


@pytest.mark.parametrize("args", LISTINGS, ids=" ".join)
@pytest.mark.parametrize("where", ["pipe", "terminal"])
def test_every_listing_reads_whole_at_80_columns(fleet: Fleet, args: tuple[str, ...], where):
    text = _piped(fleet, *args) if where == "pipe" else _on_terminal(fleet, *args)
    _assert_fits(text, args)


def test_status_titles_each_column_once_and_cuts_no_value(fleet: Fleet):
    for text in (_piped(fleet, "status"), _on_terminal(fleet, "status")):
        lines = text.splitlines()
        header = lines[lines.index("queues in default") + 1].split()
        assert len(header) == len(set(header)), header
        assert header[:2] == ["queue", "state"] and "unschedulable" in header
        for whole in (QUEUE, WORKER, fleet.map_id, "nightly-eval-70b", "hourly-metrics-rollup"):
            assert whole in text, whole
        assert " ".join(REASON.split()) in " ".join(text.split())  # folded, not cut


def test_jobs_ls_shows_each_ulid_and_queue_whole(fleet: Fleet):
    text = _on_terminal(fleet, "jobs", "ls")
    for inv in fleet.ids:
        assert inv in text
    rows = [line for line in text.splitlines() if line.startswith(tuple(fleet.ids))]
    assert len(rows) == len(fleet.ids) and all(QUEUE in row for row in rows)


WIDE = [
    (("status",), status_cli.QUEUE_COLUMNS),
    (("jobs", "ls"), jobs_cli.LS_COLUMNS),
    (("daemon", "ls"), daemon_cli.LS_COLUMNS),
    (("daemon", "show", WORKER), daemon_cli.SLOT_COLUMNS),
    (("daemon", "show", WORKER), daemon_cli.GPU_COLUMNS),
    (("queues", "ls"), queues_cli.LS_COLUMNS),
    (("queues", "show", QUEUE), queues_cli.MEMBER_COLUMNS),
    (("schedules", "ls"), schedules_cli.LS_COLUMNS),
    (("tokens", "ls"), tokens_cli.LS_COLUMNS),
]


@pytest.mark.parametrize(("args", "columns"), WIDE, ids=[" ".join(a) for a, _ in WIDE])
def test_wide_shows_every_column_one_line_per_row(fleet: Fleet, args, columns):
    narrow = _on_terminal(fleet, *args)
    wide = _on_terminal(fleet, *args, "--wide")
    headers = [c.header for c in columns]
    assert len(headers) == len(set(headers))
    titled = next(line for line in wide.splitlines() if line.startswith(headers[0] + " "))
    found = [h for h in headers if re.search(rf"(^|  ){re.escape(h)}(  |$)", titled)]
    assert found == headers, titled
    hidden = [c.header for c in columns if c.wide]
    if hidden:  # the default leaves them out, so it fits
        plain = next(line for line in narrow.splitlines() if line.startswith(headers[0] + " "))
        assert not any(re.search(rf"(^|  ){re.escape(h)}(  |$)", plain) for h in hidden)
    assert "…" not in wide


def test_wide_shows_the_whole_error_on_the_row(fleet: Fleet):
    rows = [ln for ln in _piped(fleet, "jobs", "ls", "--wide").splitlines() if "failed" in ln]
    assert len(rows) == 1 and rows[0].endswith(ERROR) and WORKER in rows[0]


def test_json_stays_complete(fleet: Fleet):
    snap = json.loads(_piped(fleet, "status", "--json"))
    (queue,) = [q for q in snap["queues"] if q["name"] == QUEUE]
    for key in ("scheduled", "waiting", "daemons", "unschedulable", "waiting_for_capacity"):
        assert key in queue
    (daemon,) = snap["daemons"]
    assert daemon["host"] == HOST
    (failed,) = json.loads(_piped(fleet, "jobs", "ls", "--state", "failed", "--json"))
    assert failed["error"] == ERROR and failed["worker"] == WORKER
