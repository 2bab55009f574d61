"""Faults of the daemon: kill -9 mid-job, paused past its lease, a CPU-bound job, a twin.

Real `lakeshore server` and `lakeshore-daemon` processes; the daemons' claims and settles are
read back from their JSON logs into a `History` and checked against the drained store.
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fault_jobs
import pytest
from history import History, absorb_daemon_log, read_rows
from procs import DaemonProcess, ServerProcess, pid_alive, wait_until

import dreamlake.lakeshore as dls
from dreamlake.lakeshore import codec
from dreamlake.lakeshore.plane import HttpDispatch
from dreamlake.lakeshore.types import Invocation

pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path / "server") as srv:
        yield srv


def daemon(srv: ServerProcess, tmp_path: Path, name: str, *args: str, **kw: Any) -> DaemonProcess:
    return DaemonProcess(tmp_path / "daemons", name, args, url=srv.url, token=srv.token, **kw)


def ppid_of(inv: Invocation) -> Any:
    return codec.decode(inv.result)["ppid"] if inv.result is not None else None


def check_daemons(
    seed: int, plane: HttpDispatch, ids: list[str], daemons: list[DaemonProcess]
) -> tuple[History, dict[str, Invocation]]:
    history = History(seed)
    for inv_id in ids:
        history.submit(inv_id, inv_id)
    for d in daemons:
        absorb_daemon_log(history, d.name, d.pid, d.events())
    rows = read_rows(plane.invocation, ids)
    anomalies = history.check(rows, result_tag=ppid_of)
    assert not anomalies, "\n".join(anomalies)
    return history, rows


def test_kill9_of_a_daemon_mid_job_loses_nothing(
    server: ServerProcess, tmp_path: Path, rng: random.Random, seed: int
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    lease = ["--lease-s", "2", "-c", "2"]
    d1 = daemon(server, tmp_path, "d1", "-q", "jobs", *lease)
    d2 = daemon(server, tmp_path, "d2", "-q", "jobs", *lease)
    daemons = [d1.ready(), d2.ready()]
    try:
        with HttpDispatch(server.url, token=server.token) as plane:
            q = dls.SyncQueue("jobs", dispatch=plane)
            ids = [
                q.submit(dls.thunk(fault_jobs.work, f"j{i}", rng.uniform(0.1, 0.6), str(markers)))
                for i in range(24)
            ]
            victim = rng.choice(daemons)
            # Kill once the victim has a job running: its child wrote a marker naming it.
            wait_until(
                lambda: any(p.read_text() == str(victim.pid) for p in markers.iterdir()),
                what=f"a job running on {victim.name}",
            )
            time.sleep(rng.uniform(0.0, 0.3))
            victim.kill9()
            orphans = [
                int(p.name.rsplit(".", 1)[1])
                for p in markers.iterdir()
                if p.read_text() == str(victim.pid)
            ]
            daemons.append(daemon(server, tmp_path, "d3", "-q", "jobs", *lease).ready())
            wait_until(
                lambda: all(plane.invocation(i).terminal for i in ids),
                timeout=60,
                what="every job terminal",
            )
            history, rows = check_daemons(seed, plane, ids, daemons)
            assert all(r.state == "succeeded" for r in rows.values()), {
                i: (r.state, r.error) for i, r in rows.items() if r.state != "succeeded"
            }
            # The victim's children died with it: none ran on past the kill -9.
            wait_until(lambda: not any(pid_alive(p) for p in orphans), what="orphans gone")
            print(f"kill9-daemon: jobs={len(ids)} {history.stats()}")
    finally:
        for d in daemons:
            d.stop()


def test_a_daemon_paused_past_its_lease_has_its_late_ack_refused(
    server: ServerProcess, tmp_path: Path, rng: random.Random, seed: int
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    sleeper = daemon(server, tmp_path, "sleeper", "-q", "pause", "--lease-s", "1.5").ready()
    daemons = [sleeper]
    try:
        with HttpDispatch(server.url, token=server.token) as plane:
            q = dls.SyncQueue("pause", dispatch=plane)
            inv = q.submit(
                dls.thunk(fault_jobs.work, "paused", rng.uniform(0.5, 1.0), str(markers))
            )
            wait_until(lambda: list(markers.iterdir()), what="the job to start on the sleeper")
            sleeper.signal(signal.SIGSTOP)  # its child runs on (own session) and finishes
            daemons.append(daemon(server, tmp_path, "rescuer", "-q", "pause").ready())
            row = plane.invocation(inv, wait_s=30)
            assert row.state == "succeeded" and row.attempt == 2, (row.state, row.error)
            assert ppid_of(row) == daemons[1].pid
            sleeper.signal(signal.SIGCONT)
            # Woken, the sleeper settles its finished attempt with a lease that is gone.
            refused = wait_until(
                lambda: (
                    sleeper.find("job.settle_refused", invocation=inv)
                    or sleeper.find("job.abandoned", invocation=inv)
                ),
                what="the sleeper's late settle to be refused",
            )
            print(f"late settle: {refused['event']}: {refused.get('error', '')}")
            after = plane.invocation(inv)
            assert (after.state, after.attempt, after.result) == ("succeeded", 2, row.result)
            assert sleeper.proc.poll() is None  # it carries on serving
            check_daemons(seed, plane, [inv], daemons)
    finally:
        for d in daemons:
            d.stop()


def test_a_cpu_bound_job_longer_than_the_lease_keeps_it(
    server: ServerProcess, tmp_path: Path, seed: int
) -> None:
    """Heartbeats go out because the job runs in a spawned child process, not in the daemon:
    the busy loop holds the child's GIL, never the daemon's, and the kernel schedules the
    daemon's heartbeat thread beside it. Two spinning jobs on this box's cores (1.5 s lease,
    4.5 s of spinning) would be re-dispatched by the server's 1 s sweeper after 1.5 s if a
    single renewal were missed; they finish on attempt 1 with no lease lost."""
    spinner = daemon(server, tmp_path, "spinner", "-q", "cpu", "-c", "2", "--lease-s", "1.5")
    try:
        spinner.ready()
        with HttpDispatch(server.url, token=server.token) as plane:
            q = dls.SyncQueue("cpu", dispatch=plane)
            ids = [
                q.submit(dls.thunk(fault_jobs.busy, 4.5, str(tmp_path / f"spin{i}")))
                for i in range(2)
            ]
            rows = [plane.invocation(i, wait_s=30) for i in ids]
            assert [(r.state, r.attempt) for r in rows] == [("succeeded", 1)] * 2, rows
            assert not spinner.find("job.lease_lost")
            check_daemons(seed, plane, ids, [spinner])
    finally:
        spinner.stop()


def test_a_second_daemon_with_the_same_name_retires_the_first(
    server: ServerProcess, tmp_path: Path, rng: random.Random, seed: int
) -> None:
    first = daemon(server, tmp_path, "twin", "-q", "twins", "--lease-s", "2", log_name="twin-1")
    daemons = [first.ready()]
    try:
        with HttpDispatch(server.url, token=server.token) as plane:
            q = dls.SyncQueue("twins", dispatch=plane)
            long_job = q.submit(dls.thunk(fault_jobs.work, "long", 2.0, str(tmp_path)))
            first.wait_for("job.claimed", invocation=long_job)
            second = daemon(
                server, tmp_path, "twin", "-q", "twins", "--lease-s", "2", log_name="twin-2"
            )
            daemons.append(second.ready())
            ids = [long_job] + [
                q.submit(dls.thunk(fault_jobs.work, f"t{i}", rng.uniform(0, 0.2)))
                for i in range(10)
            ]
            # The first one sees its row retired, stops claiming, finishes its job and leaves.
            assert first.proc.wait(30) == 0
            first.wait_for("daemon.remote_drain")
            wait_until(
                lambda: all(plane.invocation(i).terminal for i in ids),
                timeout=30,
                what="every job terminal",
            )
            _, rows = check_daemons(seed, plane, ids, daemons)
            assert all(r.state == "succeeded" for r in rows.values())
            assert ppid_of(rows[long_job]) == first.pid  # its lease outlived its row
            live = [w for w in plane.workers() if w.name == "twin"]
            assert [w.pid for w in live] == [second.pid]
    finally:
        for d in daemons:
            d.stop()
