"""Multi-node jobs (issue 47): how together a gang's parts start, and how soon a dead part's
peer is gone, beside plain `torchrun` on the same box.

Two real `lakeshore-daemon`s (`--queue bench-gang --concurrency 1 --advertise-addr 127.0.0.1`)
share an embedded SQLite plane in one `LAKESHORE_HOME`; every job is an exec envelope
(`Envelope.for_exec`, what `lakeshore exec --nodes 2` submits) running one small script with
`nodes=2, max_attempts=1`. Measured, each in this run:

- start skew: each part's child writes `time.time()` as its first line; the skew is the later
  start minus the earlier, and submit to last start is from `q.submit` to the later one.
- kill to rank 0 gone, in all_reduce: both ranks loop on a gloo `all_reduce`; rank 1's process
  is killed with SIGKILL and rank 0's pid is polled until it is gone (a zombie counts as gone).
  On one box the kernel resets the dead rank's sockets, so gloo itself raises in rank 0: this
  is mostly gloo's figure, whoever launched the ranks.
- kill to rank 0 gone, outside a collective: the same, but rank 0 sleeps after one all_reduce
  (a data-loading stall, a checkpoint write), where gloo cannot notice: only the launcher's
  word that the gang ended stops it.

The peer, in the same run: `torchrun --nnodes 2 --node-rank {0,1} --nproc-per-node 1
--rdzv-backend static` on this one box, the same script, node 1's worker (not its agent)
killed; how long node 0's worker lives on is bounded at 120 s (a row at 120 s means "at
least"). The floor: the two ranks started by hand with torch's env:// variables and no
launcher at all, in all_reduce (gloo's own detection of the reset sockets).

Run alone: .venv/bin/python -m bench.gangs [--quick]
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

from .common import Measurement, Settings, bin_path, clean_env, free_port, process, say, wait_for

QUEUE = "bench-gang"
SUITE = "gangs"
#: Longest a peer's surviving rank is watched after its partner was killed.
BOUND_S = 120.0
#: Longest a Lakeshore part is watched: its daemon stops it within seconds, or that is a defect.
LAKESHORE_BOUND_S = 60.0
ENDS = ("job.succeeded", "job.failed", "job.died", "job.lost", "job.killed", "job.abandoned")

SYSTEM = "lakeshore 2 daemons, embedded sqlite"
PEER = "torchrun static rdzv, 2 nodes on one box (peer)"
FLOOR = "floor: 2 processes, env:// by hand, no launcher"

#: The job, written to a file of its own: `start` writes the time it began (its first line);
#: `reduce` all-reduces in a loop; `idle` all-reduces once and then sleeps (outside any
#: collective). Each rank writes its pid
#: (and `start`, its start time) to OUT/<what><RANK>, by rename, so a reader never sees half.
SCRIPT = """\
import os, sys, time
began = time.time()
mode, out = sys.argv[1], sys.argv[2]
rank = os.environ["RANK"]


def put(name, text):
    tmp = os.path.join(out, f".{name}{rank}")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(out, f"{name}{rank}"))


if mode == "start":
    put("start", repr(began))
    sys.exit(0)
import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://")
dist.all_reduce(torch.ones(1))
put("pid", str(os.getpid()))
while True:
    if mode == "reduce":
        dist.all_reduce(torch.ones(1))
        time.sleep(0.01)
    else:
        time.sleep(0.05)
"""


def alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie, dead but not yet reaped, does not)."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def read(path: Path) -> str | None:
    with contextlib.suppress(FileNotFoundError):
        return path.read_text() or None
    return None


def kill_and_watch(victim: int, survivor: int, bound_s: float) -> float:
    """SIGKILL `victim`; seconds until `survivor` is gone, or `bound_s` if it outlives that."""
    killed = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    while alive(survivor):
        if time.monotonic() - killed >= bound_s:
            return bound_s
        time.sleep(0.005)
    return time.monotonic() - killed


def pids(folder: Path, timeout: float, what: str, log: Path | None = None) -> tuple[int, int]:
    wait_for(lambda: all(read(folder / f"pid{r}") for r in (0, 1)), timeout, what, log)
    return int(read(folder / "pid0") or 0), int(read(folder / "pid1") or 0)


# -- Lakeshore: two daemons, one plane ---------------------------------------------------------


class Daemon:
    """One `lakeshore-daemon` of the pair, and what its JSON log says."""

    def __init__(self, name: str, log: Path) -> None:
        self.name, self.log = name, log

    def ready(self) -> bool:
        return "worker.ready" in self.log.read_text(errors="replace")

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                with contextlib.suppress(json.JSONDecodeError):
                    out.append(json.loads(line))
        return out

    def find(self, event: str | Sequence[str], inv: str) -> dict[str, Any] | None:
        names = (event,) if isinstance(event, str) else tuple(event)
        for e in self.events():
            if e.get("event") in names and e.get("invocation") == inv:
                return e
        return None


def stamp(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()


@contextmanager
def daemons(home: Path) -> Iterator[list[Daemon]]:
    env = clean_env(LAKESHORE_HOME=str(home))
    args = ["--queue", QUEUE, "--concurrency", "1", "--advertise-addr", "127.0.0.1", "--log-json"]
    with ExitStack() as stack:
        out = []
        for i in range(2):
            log = home / f"node-{i}.log"
            argv = [bin_path("lakeshore-daemon"), "--name", f"node-{i}", *args]
            stack.enter_context(process(argv, log, env=env))
            out.append(Daemon(f"node-{i}", log))
        for d in out:
            wait_for(d.ready, 60, d.name, d.log)
        yield out


def both_ended(nodes: list[Daemon], inv: str, timeout: float = 30) -> None:
    """Both parts' daemons logged the end of `inv` (the row ends at rank 0's ack; rank 1's
    slot may be busy a moment longer, and the next gang would wait for it)."""
    wait_for(lambda: all(d.find(ENDS, inv) for d in nodes), timeout, f"both parts of {inv} ended")


def lakeshore(settings: Settings) -> list[Measurement]:
    import dreamlake.lakeshore as dls
    from dreamlake.lakeshore.envelope import Envelope
    from dreamlake.lakeshore.plane import Dispatch

    jobs = 3 if settings.quick else 6
    skews: list[float] = []
    lasts: list[float] = []
    gone: dict[str, list[float]] = {"reduce": [], "idle": []}
    how: dict[str, list[str]] = {"reduce": [], "idle": []}
    surprises: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "gang_job.py"
        script.write_text(SCRIPT)
        home = Path(tmp) / "home"
        home.mkdir()
        with daemons(home) as nodes, Dispatch(str(home / "lakeshore.db")) as plane:
            q = dls.SyncQueue(QUEUE, dispatch=plane)

            def submit(mode: str, folder: Path) -> str:
                folder.mkdir()
                command = shlex.join([sys.executable, str(script), mode, str(folder)])
                return str(q.submit(envelope=Envelope.for_exec(command), nodes=2, max_attempts=1))

            for i in range(jobs + 1):  # the first is the warm-up
                folder = Path(tmp) / f"start{i}"
                submitted = time.time()
                inv = submit("start", folder)
                files = [folder / f"start{r}" for r in (0, 1)]
                wait_for(lambda: all(read(p) for p in files), 60, "both parts started")  # noqa: B023
                began = [float(read(p) or 0) for p in files]
                row = plane.invocation(inv, wait_s=30)
                if row.state != "succeeded":
                    raise RuntimeError(f"a start job ended {row.state}: {row.error}")
                both_ended(nodes, inv)
                if i == 0:
                    continue
                skews.append((max(began) - min(began)) * 1000)
                lasts.append((max(began) - submitted) * 1000)
                say(f"  job {i}: skew {skews[-1]:.1f} ms, submit to last start {lasts[-1]:.0f} ms")
                if skews[-1] > 1000:
                    surprises.append(f"start skew {skews[-1]:.0f} ms")
            for mode in ("reduce", "idle"):
                for rep in range(settings.reps):
                    folder = Path(tmp) / f"{mode}{rep}"
                    inv = submit(mode, folder)
                    rank0, rank1 = pids(folder, 120, f"{mode}: both ranks running")
                    time.sleep(0.3)  # well into the loop (or the sleep) past the pid's write
                    killed_at = time.time()
                    seconds = kill_and_watch(rank1, rank0, LAKESHORE_BOUND_S)
                    gone[mode].append(seconds)
                    row = plane.invocation(inv, wait_s=30)
                    both_ended(nodes, inv)
                    starts = {d.name: d.find("gang.started", inv) for d in nodes}
                    first = next(d for d in nodes if (starts[d.name] or {}).get("rank") == 0)
                    stopping = first.find("gang.stopping", inv)
                    ended = first.find(ENDS, inv)
                    why = (  # in all_reduce, gloo's own error races the daemon's stop
                        f"gang.stopping logged {stamp(stopping) - killed_at:.2f}s after the kill"
                        if stopping
                        else f"no gang.stopping: ended on its own ({(ended or {}).get('event')})"
                    )
                    how[mode].append(why)
                    say(
                        f"  {mode} rep {rep}: rank 0 gone {seconds:.2f}s after the kill; "
                        f"{why}; row {row.state}"
                    )
                    if seconds >= LAKESHORE_BOUND_S:
                        surprises.append(f"{mode}: rank 0 still alive {seconds:.0f}s after")
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(rank0, signal.SIGKILL)
                    if not row.terminal or row.state != "failed":
                        surprises.append(f"{mode}: the row is {row.state} after the kill")
    for s in surprises:
        say(f"  SURPRISE: {s}")
    note = "exec envelope, nodes=2, --concurrency 1 each, one plane"
    extra = {"surprises": surprises}
    return [
        Measurement(SUITE, "start skew", SYSTEM, skews, "ms", note=note, n=len(skews), extra=extra),
        Measurement(SUITE, "submit to last start", SYSTEM, lasts, "ms", note=note, n=len(lasts)),
        Measurement(
            SUITE,
            "kill to rank 0 gone, in all_reduce",
            SYSTEM,
            gone["reduce"],
            "s",
            note="rank 1 SIGKILLed; " + (how["reduce"][0] if how["reduce"] else ""),
            extra={"how": how["reduce"], "surprises": surprises},
        ),
        Measurement(
            SUITE,
            "kill to rank 0 gone, outside a collective",
            SYSTEM,
            gone["idle"],
            "s",
            note="rank 1 SIGKILLed; " + (how["idle"][0] if how["idle"] else ""),
            extra={"how": how["idle"], "surprises": surprises},
        ),
    ]


# -- the peer: torchrun, two nodes on one box ----------------------------------------------------


def torchrun(settings: Settings) -> list[Measurement]:
    gone: dict[str, list[float]] = {"reduce": [], "idle": []}
    agents_left: dict[str, list[list[int | None]]] = {"reduce": [], "idle": []}
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "gang_job.py"
        script.write_text(SCRIPT)
        for mode in ("reduce", "idle"):
            for rep in range(settings.reps):
                folder = Path(tmp) / f"{mode}{rep}"
                folder.mkdir()
                port = free_port()
                with ExitStack() as stack:
                    logs, agents = [], []
                    for node in (0, 1):
                        argv = [bin_path("torchrun"), "--nnodes", "2", "--node-rank", str(node)]
                        argv += ["--nproc-per-node", "1", "--rdzv-backend", "static"]
                        argv += ["--master-addr", "127.0.0.1", "--master-port", str(port)]
                        argv += ["--max-restarts", "0", str(script), mode, str(folder)]
                        logs.append(Path(tmp) / f"torchrun-{mode}{rep}-{node}.log")
                        agents.append(stack.enter_context(process(argv, logs[-1], stop_grace_s=5)))
                    rank0, rank1 = pids(folder, 120, f"torchrun {mode}: both workers", logs[0])
                    time.sleep(0.3)
                    seconds = kill_and_watch(rank1, rank0, BOUND_S)
                    codes = [a.poll() for a in agents]  # None: that agent still runs
                gone[mode].append(seconds)
                agents_left[mode].append(codes)
                say(
                    f"  torchrun {mode} rep {rep}: node 0's worker "
                    + (f"still waiting at {BOUND_S:.0f}s" if seconds >= BOUND_S else "gone")
                    + f" {seconds:.2f}s after the kill; agents' exit codes then {codes}"
                )
                if seconds >= BOUND_S:
                    break  # it waits on gloo's 30-minute timeout: once is enough to show it
    bounded = f"bounded at {BOUND_S:.0f} s: {BOUND_S:.0f} means at least that"
    return [
        Measurement(
            SUITE,
            "kill to rank 0 gone, in all_reduce",
            PEER,
            gone["reduce"],
            "s",
            note="node 1's worker SIGKILLed, --max-restarts 0; " + bounded,
            extra={"agent_exit_codes": agents_left["reduce"]},
        ),
        Measurement(
            SUITE,
            "kill to rank 0 gone, outside a collective",
            PEER,
            gone["idle"],
            "s",
            note="node 1's worker SIGKILLed, --max-restarts 0; " + bounded,
            extra={
                "bounded": any(s >= BOUND_S for s in gone["idle"]),
                "agent_exit_codes": agents_left["idle"],
            },
        ),
    ]


# -- the floor: the two ranks by hand --------------------------------------------------------------


@contextmanager
def by_hand(script: Path, mode: str, folder: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    port = str(free_port())
    with ExitStack() as stack:
        procs = []
        for rank in (0, 1):
            env = clean_env(
                RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port
            )
            log = folder / f"rank{rank}.log"
            argv = [sys.executable, str(script), mode, str(folder)]
            procs.append(stack.enter_context(process(argv, log, env=env, stop_grace_s=2)))
        yield procs


def floor(settings: Settings) -> list[Measurement]:
    gone: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "gang_job.py"
        script.write_text(SCRIPT)
        for rep in range(settings.reps):
            folder = Path(tmp) / f"reduce{rep}"
            folder.mkdir()
            with by_hand(script, "reduce", folder):
                rank0, rank1 = pids(folder, 120, "by hand: both ranks")
                time.sleep(0.3)
                gone.append(kill_and_watch(rank1, rank0, BOUND_S))
            say(f"  floor rep {rep}: rank 0 gone {gone[-1]:.2f}s after the kill")
    return [
        Measurement(
            SUITE,
            "kill to rank 0 gone, in all_reduce",
            FLOOR,
            gone,
            "s",
            note="gloo's own error: the dead rank's sockets reset",
        ),
    ]


def main() -> None:
    settings = Settings.make("--quick" in sys.argv)
    ms: list[Measurement] = []
    for run in (lakeshore, torchrun, floor):
        ms += run(settings)
    for m in ms:
        print(f"{m.metric:>42} {m.system:<48} median {m.median:9.2f} {m.unit:<2} {m.values}")


if __name__ == "__main__":
    main()
