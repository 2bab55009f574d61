"""Suite `depth` (issue 17): what every verb costs with N no-op jobs queued, against an empty plane.

For SQLite (N = 1,000,000 by default, BENCH_DEPTH_ROWS or `--rows` for 10M; 2,000 under --quick)
and Postgres (scaled down to BENCH_DEPTH_PG_ROWS, default 100,000, 2,000 under --quick; the
growth from 0 to that depth is what extrapolates): seed one queue ("deep") with `submit_many`
in batches of 1,000 (timed: rate and bytes on disk per job), start a `lakeshore server` on the
same store, then time at depth 0 and at depth N: submit (one, and a batch of 1,000), claim+ack
embedded and over HTTP, count, stats, queues ls, jobs ls first page and a page N deep, the
dashboard snapshot, a /metrics scrape, `lakeshore jobs ls` wall time, and claim+ack p99 while
retention trims ended invocations in another process. Each depth-N figure carries its ratio to
depth 0 beside the target (1.5x; operator reads also under 50 ms). On Postgres the dead tuples
of `invocations` (pg_stat_user_tables.n_dead_tup) are sampled during and after the trim, on a
private server started for the run with autovacuum on (bench/pg_private.py).

Run alone: .venv/bin/python -m bench --only depth [--quick]
       or:  .venv/bin/python -m bench.depth [--rows 10000000] [--pg-rows N] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

import dreamlake.lakeshore as dls
from dreamlake.lakeshore.plane.dispatch import Dispatch
from dreamlake.lakeshore.types import Ack, ClaimArgs

from . import depth_listing
from .common import POSTGRES_URL, Measurement, Settings, clean_env, pct, say
from .lakeshore_runs import server
from .pg_private import bin_dir, private_postgres

QUEUE = "deep"
BATCH = 1000
PAGE = 20
#: Ended jobs retention trims while claims are timed.
TRIM_ROWS = 50_000
QUICK_TRIM_ROWS = 1000
#: How long the Postgres run waits for autovacuum to take the trim's dead tuples.
AUTOVACUUM_WAIT_S = 150.0
TARGET_RATIO = 1.5
READ_CAP_MS = 50.0
#: Figures that are operator reads: they must also stay under READ_CAP_MS at depth.
READS = (
    "count",
    "stats",
    "queues ls",
    "jobs ls first page",
    "jobs ls deep page",
    "dashboard snapshot",
    "/metrics scrape",
)


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm the caches
    return depth_listing.median_ms(fn, repeat)


def seed(q: dls.SyncQueue, rows: int) -> tuple[float, str | None]:
    """Submit `rows` no-ops in batches; (seconds, the id above the PAGE oldest)."""
    start = time.perf_counter()
    deep: str | None = None
    for done in range(0, rows, BATCH):
        ids = q.submit_many([0] * min(BATCH, rows - done))
        if deep is None and len(ids) > PAGE:
            deep = ids[PAGE]
    return time.perf_counter() - start, deep


def claim_ack_ms(q: dls.SyncQueue, calls: int) -> list[float]:
    out = []
    for _ in range(calls):
        start = time.perf_counter()
        job = q.claim()
        if job is None:
            break
        q.ack(job, None)
        out.append((time.perf_counter() - start) * 1000)
    return out


def cli_ms(store: str, home: Path, repeat: int) -> float:
    """Median wall time of `lakeshore jobs ls --queue deep --limit 20`, start-up included."""
    exe = Path(sys.executable).with_name("lakeshore")
    env = clean_env(LAKESHORE_HOME=str(home), LAKESHORE_STORE=store)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        argv = [str(exe), "jobs", "ls", "--queue", QUEUE, "--limit", str(PAGE)]
        done = subprocess.run(argv, env=env, check=False, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"lakeshore jobs ls exited {done.returncode}: {done.stderr[-500:]}")
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def _ended(q: dls.SyncQueue, plane: Dispatch, rows: int) -> None:
    """`rows` jobs that ran and ended (claimed and acked in batches): what retention trims."""
    q.submit_many([0] * rows)
    while claimed := plane.claim_many(ClaimArgs([q.name], "bench-ender", limit=BATCH)):
        plane.ack_many([Ack(job.id, job.lease, None) for job in claimed])


TRIM = (
    "import sys\n"
    "from dreamlake.lakeshore.plane.dispatch import Dispatch\n"
    "with Dispatch(sys.argv[1]) as p:\n"
    "    print(p.trim_retention(invocations_older_than_s=0).invocations)\n"
)


def claims_during_trim(
    store: str, q: dls.SyncQueue, dead: Callable[[], int] | None
) -> tuple[list[float], float, list[int]]:
    """Claim+ack latencies while another process trims every ended invocation; with the
    trim's seconds and, on Postgres, n_dead_tup sampled along the way."""
    samples: list[int] = []
    trim = subprocess.Popen(
        [sys.executable, "-c", TRIM, store], env=clean_env(), stdout=subprocess.DEVNULL
    )
    start = time.perf_counter()
    lat: list[float] = []
    last_sample = 0.0
    while trim.poll() is None:
        lat += claim_ack_ms(q, 20)
        if dead is not None and time.perf_counter() - last_sample > 0.5:
            samples.append(dead())
            last_sample = time.perf_counter()
    took = time.perf_counter() - start
    if trim.returncode != 0:
        raise RuntimeError(f"the trim exited {trim.returncode}")
    return lat, took, samples


@contextlib.contextmanager
def _pg_dead_tuples(store: str) -> Iterator[tuple[Callable[[], int], bool]]:
    """n_dead_tup of the plane's `invocations`, and whether the server runs autovacuum."""
    import psycopg

    from dreamlake.lakeshore.plane.postgres import parse_url

    conninfo, schema = parse_url(store)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        # A server with autovacuum off (this box's test server) never takes them: say so.
        (autovacuum,) = conn.execute("SHOW autovacuum").fetchone() or ("?",)

        def dead() -> int:
            row = conn.execute(
                "SELECT n_dead_tup FROM pg_stat_user_tables "
                "WHERE relname = 'invocations' AND schemaname = %s",
                (schema,),
            ).fetchone()
            return int(row[0]) if row else -1

        yield dead, autovacuum == "on"


def _autovacuum(dead: Callable[[], int], peak: int, wait_s: float) -> dict[str, Any]:
    """How long autovacuum took to bring the dead tuples under a tenth of the trim's peak
    (polled once a second; its naptime is 60 s by default), and how many were left."""
    start = time.monotonic()
    left = dead()
    while left > peak // 10 and time.monotonic() - start < wait_s:
        time.sleep(1.0)
        left = dead()
    return {"n_dead_tup_settled": left, "autovacuum_s": round(time.monotonic() - start)}


def measure_at(
    store: str, home: Path, rows: int, s: Settings
) -> tuple[dict[str, float], dict[str, Any]]:
    """Every figure at one depth: ({figure: ms}, facts about the seed and the trim)."""
    repeat = 5 if s.quick else 21
    calls = 50 if s.quick else 500
    facts: dict[str, Any] = {}
    plane = Dispatch(store)
    q = dls.SyncQueue(QUEUE, dispatch=plane)
    took, deep = seed(q, rows)
    if rows:
        facts["seed_s"] = round(took, 1)
        facts["seed_jobs_per_s"] = round(rows / took)
    if not store.startswith("postgres"):
        facts["bytes_per_job"] = round(Path(store).stat().st_size / max(1, rows))
    extra = q.submit_many([0] * (calls * 3))  # what the claims below take, at either depth
    deep = deep or extra[PAGE]  # depth 0: a page below the newest is as deep as it gets
    got: dict[str, float] = {}
    with server(home / "srv", store) as (url, token, _):
        http = dls.HttpDispatch(url, token=token)
        hq = dls.SyncQueue(QUEUE, dispatch=http)
        auth = {"authorization": f"Bearer {token}", "accept": "application/json"}
        with httpx.Client(base_url=url, headers=auth, timeout=60) as web:
            got["submit one"] = median_ms(lambda: q.submit(0), repeat)
            got["submit batch of 1000"] = median_ms(lambda: q.submit_many([0] * BATCH), 5)
            embedded = claim_ack_ms(q, calls)
            got["claim+ack embedded p50"] = pct(embedded, 50)
            got["claim+ack embedded p99"] = pct(embedded, 99)
            got["claim+ack http p50"] = pct(claim_ack_ms(hq, calls), 50)
            got["count"] = median_ms(q.count, repeat)
            got["stats"] = median_ms(lambda: plane.stats(QUEUE), repeat)
            got["queues ls"] = median_ms(plane.queues, repeat)
            got["jobs ls first page"] = median_ms(
                lambda: plane.invocations(queue=QUEUE, limit=PAGE), repeat
            )
            got["jobs ls deep page"] = median_ms(
                lambda: plane.invocations(queue=QUEUE, limit=PAGE, before=deep), repeat
            )
            got["dashboard snapshot"] = median_ms(
                lambda: web.get("/v1/namespaces/default/dashboard").raise_for_status(), repeat
            )
            got["/metrics scrape"] = median_ms(
                lambda: web.get("/metrics").raise_for_status(), repeat
            )
        http.close()
    got["lakeshore jobs ls (wall)"] = cli_ms(store, home, 3 if s.quick else 7)
    # The same trim at either depth: its size is the history's, not the queue's.
    _ended(dls.SyncQueue("ended", dispatch=plane), plane, QUICK_TRIM_ROWS if s.quick else TRIM_ROWS)
    # Claims while the trim runs never find the queue empty.
    q.submit_many([0] * (2 if s.quick else 20) * BATCH)
    with contextlib.ExitStack() as stack:
        dead: Callable[[], int] | None = None
        on = False
        if store.startswith("postgres"):
            dead, on = stack.enter_context(_pg_dead_tuples(store))
        lat, trim_s, samples = claims_during_trim(store, q, dead)
        got["claim+ack p99 during a trim"] = pct(lat, 99)
        facts["trim_s"] = round(trim_s, 1)
        if dead is not None:
            peak = max(samples, default=dead())
            facts["n_dead_tup_max_during_trim"] = peak
            facts["n_dead_tup_after"] = dead()
            # Once, at depth N: autovacuum's naptime makes this the run's longest wait.
            facts["autovacuum"] = "on" if on else "off"
            wait_s = AUTOVACUUM_WAIT_S if rows and on and not s.quick else 0.0
            facts.update(_autovacuum(dead, peak, wait_s))
    if not store.startswith("postgres"):
        facts["file_mb_after_trim"] = round(Path(store).stat().st_size / 1e6, 1)
    plane.close()
    return got, facts


def _verdict(figure: str, base: float, deep: float) -> str:
    ratio = deep / base if base else float("inf")
    ok = ratio <= TARGET_RATIO and (figure not in READS or deep < READ_CAP_MS)
    goal = f"<= {TARGET_RATIO}x" + (f", < {READ_CAP_MS:.0f} ms" if figure in READS else "")
    return f"{ratio:.2f}x depth 0 (target {goal}): {'ok' if ok else 'MISSED'}"


Stores = Callable[[int, Path], contextlib.AbstractContextManager[str]]


def compare(system: str, rows: int, stores: Stores, s: Settings) -> list[Measurement]:
    """Every figure at depth 0 and at `rows`, the deep ones noted with their ratio."""
    out: list[Measurement] = []
    results: dict[int, tuple[dict[str, float], dict[str, Any]]] = {}
    for depth in (0, rows):
        with tempfile.TemporaryDirectory(prefix="lakeshore-depth-") as scratch:
            home = Path(scratch)
            with stores(depth, home) as store:
                say(f"[depth] {system}: depth {depth:,}")
                results[depth] = measure_at(store, home, depth, s)
                say(f"[depth] {system}: depth {depth:,}: {results[depth]}")
    base, _ = results[0]
    deep, facts = results[rows]
    for figure, ms in base.items():
        out.append(Measurement("depth", figure, f"{system}, depth 0", [ms], "ms"))
    for figure, ms in deep.items():
        note = _verdict(figure, base[figure], ms) if figure in base else ""
        out.append(
            Measurement(
                "depth", figure, f"{system}, depth {rows:,}", [ms], "ms", note=note, extra=facts
            )
        )
    say(f"[depth] {system}: {facts}")
    return out


@contextlib.contextmanager
def _sqlite_store(depth: int, home: Path) -> Iterator[str]:
    yield str(home / "lakeshore.db")


@contextlib.contextmanager
def _postgres_store(depth: int, home: Path) -> Iterator[str]:
    """A scratch schema on a private server with autovacuum on, as servers ship (this box's
    shared one has it off, so its dead tuples would say nothing); the shared server when no
    private one can start here (BENCH_DEPTH_PG_SHARED=1 asks for it)."""
    from dreamlake.lakeshore.plane.postgres import scratch_schema

    with contextlib.ExitStack() as stack:
        url = POSTGRES_URL
        if not os.environ.get("BENCH_DEPTH_PG_SHARED") and bin_dir() is not None:
            url = stack.enter_context(private_postgres())
        yield stack.enter_context(scratch_schema(url, "bench_depth"))


def sqlite_rows(s: Settings) -> int:
    return 2000 if s.quick else int(os.environ.get("BENCH_DEPTH_ROWS", "1000000"))


def postgres_rows(s: Settings) -> int:
    return 1000 if s.quick else int(os.environ.get("BENCH_DEPTH_PG_ROWS", "100000"))


def measure_sqlite(s: Settings) -> list[Measurement]:
    return compare("lakeshore sqlite", sqlite_rows(s), _sqlite_store, s)


def measure_postgres(s: Settings) -> list[Measurement]:
    return compare("lakeshore postgres", postgres_rows(s), _postgres_store, s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=None, help="SQLite depth (default 1M)")
    parser.add_argument("--pg-rows", type=int, default=None, help="Postgres depth (100k)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--skip-sqlite", action="store_true")
    args = parser.parse_args()
    if args.rows is not None:
        os.environ["BENCH_DEPTH_ROWS"] = str(args.rows)
    if args.pg_rows is not None:
        os.environ["BENCH_DEPTH_PG_ROWS"] = str(args.pg_rows)
    settings = Settings.make(args.quick)
    runs = [] if args.skip_sqlite else [measure_sqlite]
    runs += [] if args.skip_postgres else [measure_postgres]
    for run in runs:
        for m in run(settings):
            print(f"{m.system:<36} {m.metric:<28} {m.median:9.2f} {m.unit}  {m.note}")


if __name__ == "__main__":
    main()
