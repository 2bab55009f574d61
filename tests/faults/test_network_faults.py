"""A chaotic network between the workers and the server: delays, dropped and cut connections,
a blackhole; daemons and logged worker loops both sit behind the proxy, producers do not."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import fault_jobs
import pytest
from history import History, absorb_daemon_log, read_rows
from loops import LoopWorker, Submitter, drain, join_all, rows_in_queue
from procs import DaemonProcess, ServerProcess, wait_until
from proxy import ChaosProxy
from test_daemon_faults import ppid_of

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane import HttpDispatch

pytestmark = pytest.mark.slow

ACTIONS = ("delay", "drop", "cut", "blackhole", "calm")


def play(proxy: ChaosProxy, rng: random.Random, seconds: float) -> list[str]:
    """A seeded schedule of network faults for `seconds`; returns what it did."""
    done = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        action = rng.choice(ACTIONS)
        done.append(action)
        if action == "delay":
            proxy.set(delay_s=rng.uniform(0.05, 0.3))
        elif action == "drop":
            proxy.set(drop_p=rng.uniform(0.2, 0.6))
        elif action == "cut":
            proxy.cut_all()
        elif action == "blackhole":
            proxy.set(blackhole=True)
            time.sleep(rng.uniform(0.5, 1.5))
            proxy.set()
            proxy.cut_all()  # what a blackhole leaves behind is dead anyway
        else:
            proxy.set()
        time.sleep(rng.uniform(0.2, 0.8))
    proxy.set()
    return done


@pytest.mark.parametrize("channel", ["push", "requests"])
def test_daemons_and_workers_behind_a_chaotic_network(
    tmp_path: Path, rng: random.Random, seed: int, channel: str
) -> None:
    """The daemons keep their channel (issue 48) through the same faults: `push`, the
    default, beside HTTP requests; `requests`, every request over the channel."""
    srv = ServerProcess(tmp_path / "server").start()
    proxy = ChaosProxy(srv.port, rng).__enter__()
    history = History(seed)
    stop = threading.Event()
    args = ["-q", "net", "-c", "2", "--lease-s", "3"]
    daemons = [
        DaemonProcess(
            tmp_path / "d",
            f"n{i}",
            args,
            url=proxy.url,
            token=srv.token,
            env={"LAKESHORE_CHANNEL": channel},
        )
        for i in range(2)
    ]
    producer = HttpDispatch(srv.url, token=srv.token)
    behind = [HttpDispatch(proxy.url, token=srv.token, timeout_s=3) for _ in range(2)]
    try:
        for d in daemons:
            d.ready()
        q = dls.SyncQueue("net", dispatch=producer)
        ids = [
            q.submit(dls.thunk(fault_jobs.work, f"n{i}", rng.uniform(0.2, 0.8))) for i in range(30)
        ]
        submitter = Submitter("s", producer, history, "netloop", [f"k{i}" for i in range(80)])
        workers = [
            LoopWorker(f"w{i}", p, history, "netloop", stop, rng=rng, lease_s=2, work_s=(0.0, 1.0))
            for i, p in enumerate(behind)
        ]
        for t in [submitter, *workers]:
            t.start()
        actions = play(proxy, rng, 8.0)
        join_all([submitter], 30)
        drain(producer, sorted(history.ids()), 60)
        wait_until(
            lambda: all(producer.invocation(i).terminal for i in ids),
            timeout=60,
            what="every daemon job terminal",
        )
        stop.set()
        join_all(workers, 15)

        loop_rows = read_rows(producer.invocation, history.ids())
        anomalies = history.check(loop_rows, rows_in_queue=rows_in_queue(producer, "netloop"))
        daemon_history = History(seed)
        for inv_id in ids:
            daemon_history.submit(inv_id, inv_id)
        for d in daemons:
            absorb_daemon_log(daemon_history, d.name, d.pid, d.events())
        rows = read_rows(producer.invocation, ids)
        anomalies += daemon_history.check(rows, result_tag=ppid_of)
        assert not anomalies, "\n".join(anomalies)
        unfinished = {i: (r.state, r.error) for i, r in rows.items() if r.state != "succeeded"}
        assert not unfinished, unfinished
        print(
            f"network: actions={actions} proxy={proxy.stats} loops={history.stats()} "
            f"daemons={daemon_history.stats()}"
        )
    finally:
        stop.set()
        for d in daemons:
            d.stop()
        for p in [producer, *behind]:
            p.close()
        proxy.close()
        srv.stop()
