"""Suite `channel` (issue 48): a daemon's one open channel to its server, beside the same daemon
sending each request over HTTP, in one run.

Three `lakeshore server`s on SQLite (synchronous=FULL), each with one `lakeshore-daemon` (one
slot, the no-op handler), one per `--channel` mode: `off` (every request its own HTTP
request, as before), `push` (the default: the channel carries the server's pushes) and
`requests` (the daemon's requests go over the channel too). The producer is this process,
over HTTP to all three. Calls alternate between the sides, so a slow minute of this shared
box slows all alike:

- `q.call` of a no-op, p50 and p99, each side;
- `lakeshore jobs cancel --kill` to the job's end: a job sleeping in its child is killed
  (`cancel(kill=True)`), timed until its row is `killed`. With the channel the server pushes
  the kill to the daemon at once; without, the daemon learns it at its next lease renewal
  (at least every second while a job runs).

Run alone: .venv/bin/python -m bench.channel [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import dreamlake.lakeshore as dls

from .common import Measurement, Settings, pct, say, wait_for
from .lakeshore_runs import FULL, daemons, server

SUITE = "channel"
MODES = {
    "off": "lakeshore http (sqlite), --channel off",
    "push": "lakeshore http (sqlite), --channel push (default)",
    "requests": "lakeshore http (sqlite), --channel requests",
}
BASE = MODES["off"]


@contextlib.contextmanager
def _side(home: Path, mode: str) -> Iterator[dls.SyncQueue]:
    env = {"LAKESHORE_CHANNEL": mode}
    with (
        server(home / "srv", str(home / "srv" / "lakeshore.db")) as (url, token, _),
        daemons(1, "rpc", home=home, url=url, token=token, env=env),
    ):
        plane = dls.HttpDispatch(url, token=token)
        try:
            q = dls.SyncQueue("rpc", dispatch=plane)
            wait_for(lambda: q.call(0, timeout=2) == 0, 90, "daemon")
            yield q
        finally:
            plane.close()


def _kill_ms(q: dls.SyncQueue) -> float:
    inv = q.submit(dls.thunk(time.sleep, 60))
    wait_for(lambda: q.status(inv).state == "running", 30, "the job to start")
    time.sleep(0.2)  # the child is in its sleep (a kill before it runs is not this figure)
    start = time.perf_counter()
    q.cancel(inv, kill=True)
    row = q.dispatch.invocation(inv, wait_s=30)
    took = (time.perf_counter() - start) * 1000
    if row.state != "killed":
        raise RuntimeError(f"the killed job ended {row.state}")
    return took


def measure(s: Settings) -> list[Measurement]:
    calls = 300 if s.quick else 3000
    kills = 3 if s.quick else 10
    with tempfile.TemporaryDirectory(prefix="bench-channel-") as tmp, contextlib.ExitStack() as st:
        sides = {
            name: st.enter_context(_side(Path(tmp) / mode, mode)) for mode, name in MODES.items()
        }
        times: dict[str, list[float]] = {name: [] for name in sides}
        for i in range(calls):
            for name, q in sides.items():
                start = time.perf_counter()
                q.call(i, timeout=10)
                times[name].append((time.perf_counter() - start) * 1000)
        killed: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(kills):
            for name, q in sides.items():
                killed[name].append(_kill_ms(q))
    base = statistics.median(times[BASE])
    out = []
    for name in sides:
        p50 = statistics.median(times[name])
        note = "" if name == BASE else f"{p50 / base:.2f}x --channel off's p50"
        out += [
            Measurement(SUITE, "q.call p50", name, [p50], "ms", FULL, note, n=calls),
            Measurement(SUITE, "q.call p99", name, [pct(times[name], 99)], "ms", FULL, n=calls),
            Measurement(
                SUITE,
                "cancel --kill to the job's end",
                name,
                [statistics.median(killed[name])],
                "ms",
                FULL,
                f"median of {kills}, max {max(killed[name]):.0f} ms",
                n=kills,
            ),
        ]
    say(f"[channel] {', '.join(f'{m.system}: {m.metric} {m.median:.2f}' for m in out)}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    for m in measure(Settings.make(args.quick)):
        print(f"{m.system:58} {m.metric:32} {m.median:9.2f} {m.unit}  {m.note}")


if __name__ == "__main__":
    main()
