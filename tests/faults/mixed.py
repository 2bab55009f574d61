"""Faults mixed at random: one seeded schedule over a server, real daemons and logged worker
loops, checked by the history checker. The fault suite runs it briefly; `bench/soak.py` runs it
for as long as it is asked, on SQLite and on Postgres.

Faults in the mix: kill -9 of a daemon (a fresh one replaces it), SIGSTOP of a daemon past its
lease then SIGCONT, kill -9 of the server and a graceful restart, both on the same store; all
along, worker loops that lose some answers (and resend) and stall some jobs past their lease.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fault_jobs
from history import History, absorb_daemon_log, read_rows
from loops import LoopWorker, LossyTransport, Submitter, drain, join_all, rows_in_queue
from procs import DaemonProcess, ServerProcess

import dreamlake.lakeshore as dls
from dreamlake.lakeshore import codec
from dreamlake.lakeshore.plane import HttpDispatch
from dreamlake.lakeshore.types import Invocation

FAULTS = ("kill9-daemon", "sigstop-daemon", "kill9-server", "restart-server", "calm")
#: Checkpointing jobs in the mix (issue 35): steps, checkpoint interval, pause per step.
CHECKPOINTED = (2, 80, 5, 0.1)
DAEMON_LEASE_S = 2.0
LOOP_LEASE_S = 1.0


@dataclass
class MixedReport:
    seed: int
    seconds: float
    faults: list[str] = field(default_factory=list)
    daemon_jobs: int = 0
    loop_jobs: int = 0
    anomalies: list[str] = field(default_factory=list)
    loop_stats: dict[str, int] = field(default_factory=dict)
    daemon_stats: dict[str, int] = field(default_factory=dict)
    #: Steps run again at each resume of a checkpointing job (at most one interval each).
    checkpoint_resumes: list[int] = field(default_factory=list)


def _ppid(inv: Invocation) -> Any:
    return codec.decode(inv.result)["ppid"] if inv.result is not None else None


def run_mixed(
    home: Path,
    seed: int,
    *,
    seconds: float = 10.0,
    store: str | None = None,
    daemon_jobs: int = 30,
    loop_jobs: int = 120,
) -> MixedReport:
    rng = random.Random(seed)
    report = MixedReport(seed, seconds)
    srv = ServerProcess(home / "server", store).start()
    history = History(seed)
    stop = threading.Event()
    counter = iter(range(1000))
    args = ["-q", "mixed", "-c", "2", "--lease-s", str(DAEMON_LEASE_S)]

    def new_daemon() -> DaemonProcess:
        n = next(counter)
        return DaemonProcess(home / "d", f"m{n}", args, url=srv.url, token=srv.token)

    daemons = [new_daemon(), new_daemon()]
    all_daemons = list(daemons)
    producer = HttpDispatch(srv.url, token=srv.token, timeout_s=5)
    lossy = [
        HttpDispatch(
            srv.url,
            token=srv.token,
            timeout_s=5,
            transport=LossyTransport(
                random.Random(rng.random()), 0.1, ("/invocations", "/ack", "/nack")
            ),
        )
        for _ in range(3)
    ]
    try:
        for d in daemons:
            d.ready()
        checkpointed = _submit_checkpointed(producer, home)
        submitter = Submitter("s", lossy[0], history, "loops", [f"k{i}" for i in range(loop_jobs)])
        workers = [
            LoopWorker(
                f"w{i}",
                p,
                history,
                "loops",
                stop,
                rng=rng,
                lease_s=LOOP_LEASE_S,
                work_s=(0.0, 0.6),
                stall_p=0.1,
                stall_s=LOOP_LEASE_S + 1.2,
                fail_p=0.05,
            )
            for i, p in enumerate(lossy[1:])
        ]
        for t in [submitter, *workers]:
            t.start()
        ids: list[str] = []
        end = time.monotonic() + seconds
        while time.monotonic() < end or len(ids) < daemon_jobs:
            if len(ids) < daemon_jobs:
                ids += _submit_some(producer, rng, daemon_jobs - len(ids))
            fault = rng.choice(FAULTS)
            report.faults.append(fault)
            _inflict(fault, rng, srv, daemons, all_daemons, new_daemon)
            time.sleep(rng.uniform(0.3, 1.5))
        join_all([submitter], 60)
        drain(producer, sorted(history.ids()), 90)
        drain(producer, ids, 90)
        drain(producer, list(checkpointed), 90)
        stop.set()
        join_all(workers, 20)

        rows = read_rows(producer.invocation, history.ids())
        report.anomalies += history.check(rows, rows_in_queue=rows_in_queue(producer, "loops"))
        daemon_history = History(seed)
        for inv_id in ids:
            daemon_history.submit(inv_id, inv_id)
        for d in all_daemons:
            absorb_daemon_log(daemon_history, d.name, d.pid, d.events())
        drows = read_rows(producer.invocation, ids)
        report.anomalies += daemon_history.check(drows, result_tag=_ppid)
        report.anomalies += [
            f"[seed {seed}] daemon job {i} ended {r.state}: {r.error}"
            for i, r in drows.items()
            if r.state != "succeeded"
        ]
        report.anomalies += _checkpoint_anomalies(seed, producer, checkpointed)
        report.checkpoint_resumes = [
            n
            for log in checkpointed.values()
            if log.exists()
            for n in fault_jobs.progress_lost(str(log))
        ]
        report.anomalies += _counter_drift(seed, srv)
        report.daemon_jobs, report.loop_jobs = len(ids), len(history.ids())
        report.loop_stats, report.daemon_stats = history.stats(), daemon_history.stats()
        return report
    finally:
        stop.set()
        for d in all_daemons:
            d.stop()
        for p in [producer, *lossy]:
            p.close()
        srv.stop()


def _submit_checkpointed(plane: HttpDispatch, home: Path) -> dict[str, Path]:
    """The checkpointing jobs, each with the log of the steps it ran."""
    count, steps, every, pause_s = CHECKPOINTED
    q = dls.SyncQueue("mixed", dispatch=plane)
    logs = {}
    for i in range(count):
        log = home / f"checkpointed-{i}.log"
        job = dls.thunk(fault_jobs.checkpointed, steps, every, str(log), pause_s)
        logs[q.submit(job, max_attempts=1)] = log
    return logs


def _checkpoint_anomalies(seed: int, plane: HttpDispatch, logs: dict[str, Path]) -> list[str]:
    """Every checkpointing job succeeded with the exact total (no step lost or counted twice),
    and each resume ran again at most one checkpoint interval of steps."""
    _, steps, every, _ = CHECKPOINTED
    out = []
    for inv_id, log in logs.items():
        row = plane.invocation(inv_id)
        expected = sum(i * i for i in range(1, steps + 1))
        if row.state != "succeeded" or codec.decode(row.result or b"") != expected:
            out.append(f"[seed {seed}] checkpointed job {inv_id} ended {row.state}: {row.error}")
        lost = fault_jobs.progress_lost(str(log)) if log.exists() else []
        if any(n > every for n in lost):
            out.append(f"[seed {seed}] checkpointed job {inv_id} re-ran {lost} steps per resume")
    return out


def _counter_drift(seed: int, srv: ServerProcess) -> list[str]:
    """The depth counters against a recount of the rows, after every kill -9 of the run: a
    counter is written in the transaction of its state change, so none may have drifted."""
    from dreamlake.lakeshore.plane.dispatch import open_store

    store = open_store(srv.store or str(srv.home / "lakeshore.db"), create=False)
    try:
        drift = store.recount_check()
    finally:
        store.close()
    return [
        f"[seed {seed}] depth counter {r['namespace']}/{r['queue']}/{r['state']} keeps "
        f"{r['kept']}, the rows say {r['found']}"
        for r in drift
    ]


def _inflict(
    fault: str,
    rng: random.Random,
    srv: ServerProcess,
    daemons: list[DaemonProcess],
    all_daemons: list[DaemonProcess],
    new_daemon: Callable[[], DaemonProcess],
) -> None:
    if fault == "kill9-daemon":
        victim = daemons.pop(rng.randrange(len(daemons)))
        victim.kill9()
        daemons.append(new_daemon())
        all_daemons.append(daemons[-1])
        daemons[-1].ready()
    elif fault == "sigstop-daemon":
        victim = rng.choice(daemons)
        victim.signal(signal.SIGSTOP)
        time.sleep(DAEMON_LEASE_S + rng.uniform(1.0, 2.0))
        victim.signal(signal.SIGCONT)
    elif fault == "kill9-server":
        srv.kill9()
        time.sleep(rng.uniform(0.0, 0.5))
        srv.start()
    elif fault == "restart-server":
        srv.stop()
        srv.start()


def _submit_some(plane: HttpDispatch, rng: random.Random, most: int) -> list[str]:
    """A few daemon jobs; a submit refused while the server is away is simply not made."""
    q = dls.SyncQueue("mixed", dispatch=plane)
    out = []
    for _ in range(min(most, rng.randint(3, 10))):
        try:
            out.append(
                q.submit(
                    dls.thunk(fault_jobs.work, f"m{rng.random():.6f}", rng.uniform(0.1, 1.5)),
                    max_attempts=10,
                )
            )
        except dls.DispatchError:
            break
    return out
