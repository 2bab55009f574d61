"""Scale: many idle daemons long-polling a server, simulated by an asyncio client process.

Each simulated daemon holds `POST /claims` with wait=20 s on a queue of its own that never gets
work (an idle daemon's claim), and asks again when it returns. Meanwhile one real
`lakeshore-daemon` serves queue `live`: the figures are the server's CPU and RSS while only the
idle polls are held, and, with and without them, a producer's `q.call` p50/p99 through that
daemon and the latency of a claim on a queue that has work (a daemon's claim), p99. Then the
same over two server replicas on Postgres (half the polls on each).

    python -m bench.scale idle-clients URL TOKEN N   # the simulated daemons (a child process)
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
import time
from pathlib import Path

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane.base import claim as claim_one
from dreamlake.lakeshore.types import ClaimArgs

from .common import (
    POSTGRES_URL,
    Measurement,
    Settings,
    clean_env,
    cpu_seconds,
    log_dir,
    pct,
    process,
    rpc_loop,
    rss_mib,
    tree,
)
from .lakeshore_runs import FULL, PG_DURABILITY, _ready, daemons, server


async def idle_clients(url: str, token: str, n: int) -> None:
    import httpx

    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
    headers = {"authorization": f"Bearer {token}", "accept": "application/json"}
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=60) as c:

        async def one(i: int) -> None:
            body = {"queues": [f"idle-{i}"], "worker": f"sim-{i}", "wait": 20}
            while True:
                try:
                    await c.post("/v1/namespaces/default/claims", json=body)
                except httpx.HTTPError:
                    await asyncio.sleep(0.5)

        tasks = [asyncio.create_task(one(i)) for i in range(n)]
        print("started", flush=True)
        await asyncio.gather(*tasks)


def claim_latencies(plane: dls.Plane, n: int) -> list[float]:
    """A daemon's claim on a queue with work: n claims (each acked), latency in ms."""
    q = dls.SyncQueue("probe", dispatch=plane)
    q.submit_many(list(range(n)))
    out = []
    for _ in range(n):
        start = time.perf_counter()
        claim = claim_one(plane, ClaimArgs(["probe"], "probe"), wait_s=5)
        out.append((time.perf_counter() - start) * 1000)
        assert claim is not None
        plane.ack(claim.id, claim.lease, None)
    return out


def measure(s: Settings) -> list[Measurement]:
    """One server on SQLite: every poll, the daemon and the producer on it."""
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        home = Path(tmp)
        with server(home / "srv", str(home / "srv" / "lakeshore.db")) as srv:
            return _measure(s, home, "lakeshore http (sqlite)", FULL, [srv])


def measure_replicas(s: Settings) -> list[Measurement]:
    """Two server replicas on one Postgres schema: the polls split between them, the daemon on
    one and the producer on the other, so every call's wake-ups cross replicas (NOTIFY)."""
    from dreamlake.lakeshore.plane.postgres import scratch_schema

    with (
        tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp,
        scratch_schema(POSTGRES_URL, "bench_scale") as scoped,
    ):
        home = Path(tmp)
        with server(home / "a", scoped) as a, server(home / "b", scoped) as b:
            system = "lakeshore http (postgres, 2 replicas)"
            return _measure(s, home, system, PG_DURABILITY, [a, b])


def _measure(
    s: Settings, home: Path, system: str, dur: str, servers: list[tuple[str, str, int]]
) -> list[Measurement]:
    n = s.scale_clients
    calls = min(s.calls, 500)
    out: list[Measurement] = []
    (url, token, _), (producer_url, _, _) = servers[0], servers[-1]
    with (
        daemons(1, "live", home=home, url=url, token=token),
        dls.HttpDispatch(producer_url, token=token) as plane,
    ):
        q = dls.SyncQueue("live", dispatch=plane)
        _ready(q)

        def probe(label: str) -> None:
            lat = rpc_loop(lambda i: q.call(i, timeout=10), calls, s.rpc_cap_s, 20)
            claims = claim_latencies(plane, min(calls, 300))
            figures = [
                (f"q.call p50, {label}", pct(lat, 50), "", len(lat)),
                (f"q.call p99, {label}", pct(lat, 99), "", len(lat)),
                (f"claim p99, {label}", pct(claims, 99), "claim on a queue with work", len(claims)),
            ]
            out.extend(
                Measurement("scale", metric, system, [value], "ms", dur, note, count)
                for metric, value, note, count in figures
            )

        probe("alone")
        with contextlib.ExitStack() as stack:
            clients = []
            for i, (srv_url, _, _) in enumerate(servers):
                share = n // len(servers) + (1 if i < n % len(servers) else 0)
                argv = [sys.executable, "-m", "bench.scale", "idle-clients", srv_url, token]
                argv.append(str(share))
                log = log_dir() / f"scale-clients-{i}.log"
                clients.append(stack.enter_context(process(argv, log, clean_env())))
            time.sleep(3.0)  # every poll sent and held
            procs = [p for _, _, pid in servers for p in tree(pid)]
            before, t0 = cpu_seconds(procs), time.monotonic()
            time.sleep(s.scale_s)
            cpu = 100 * (cpu_seconds(procs) - before) / (time.monotonic() - t0)
            rss = rss_mib([p for _, _, pid in servers for p in tree(pid)])
            alive = all(c.poll() is None for c in clients)
            where = "one core" if len(servers) == 1 else f"one core, {len(servers)} servers"
            out += [
                Measurement(
                    "scale",
                    f"server CPU, {n} idle polls",
                    system,
                    [cpu],
                    "%",
                    dur,
                    f"% of {where}",
                ),
                Measurement("scale", f"server RSS, {n} idle polls", system, [rss], "MiB", dur),
            ]
            probe(f"{n} idle polls")
            if not alive:
                raise RuntimeError("the simulated daemons exited early; see scale-clients-*.log")
    return out


if __name__ == "__main__":
    if sys.argv[1] == "idle-clients":
        asyncio.run(idle_clients(sys.argv[2], sys.argv[3], int(sys.argv[4])))
