"""One table for a benchmark run: rows of (what, rate or latency, ratio to a peer)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from .durable_floor import POSTGRES_FLOOR, SQLITE_FLOOR
from .store_call import SYSTEM as STORE_ALONE


@dataclass
class Row:
    group: str
    system: str
    value: float
    unit: str  # "ops/s" (higher is better) or "ms" (lower is better)
    note: str = ""


def ratio(row: Row, peer: Row) -> float:
    """How many times better `row` is than `peer` (>1 means ahead)."""
    if row.unit == "ms":
        return peer.value / row.value if row.value else float("inf")
    return row.value / peer.value if peer.value else float("inf")


def render(title: str, rows: list[Row], baselines: dict[str, str]) -> None:
    """Print rows grouped, each with its ratio against the group's named baseline system."""
    table = Table(title=title)
    for col in ("benchmark", "system", "value", "vs baseline", "note"):
        table.add_column(col)
    for group in dict.fromkeys(r.group for r in rows):
        members = [r for r in rows if r.group == group]
        base = next((r for r in members if r.system == baselines.get(group)), None)
        for r in members:
            rel = f"{ratio(r, base):.2f}x {base.system}" if base and r is not base else "-"
            table.add_row(group, r.system, f"{r.value:,.1f} {r.unit}", rel, r.note)
    Console().print(table)


# -- the run's results: results.json, table.md, chart.png -----------------------------------------

#: Per suite, the peer every row of that suite is compared with (the first one present).
BASELINES: dict[str, tuple[str, ...]] = {
    "rpc": ("ray (local tasks)", "celery (redis)"),
    "fanout": ("rq (SimpleWorker)", "celery (redis)"),
    "embedded": ("huey (SqliteHuey)",),
    "postgres": ("procrastinate", "pgqueuer"),
    "payload": ("rq (SimpleWorker)", "ray (local tasks)"),
    "locality": ("lakeshore http, locality off (wait 0)",),
    "concurrency": ("ray (local tasks)", "celery (redis)"),
    "map": ("ray (local tasks)", "celery (redis)"),
    "placement": ("lakeshore daemon -c 8, static slots, no request",),
    "runtime": ("ray runtime_env working_dir",),
    "envs": ("ray runtime_env uv",),
    "gangs": ("torchrun static rdzv, 2 nodes on one box (peer)",),
    "channel": ("lakeshore http (sqlite), --channel off",),
}
SUITE_TITLES = {
    "rpc": "1. RPC: q.call of a no-op, one producer, one worker (latency; lower is better)",
    "fanout": "2. Fan-out: no-op jobs submitted, drained by 2 worker processes (higher is better)",
    "payload": "3. Payload cost: q.call echoing a float32 numpy array (latency; lower is better)",
    "embedded": "4. Embedded floor: SQLite plane vs SqliteHuey vs raw SQLite, one process",
    "postgres": "4b. Postgres plane vs pgqueuer / procrastinate, one process",
    "idle": "4c. Idle cost: a worker with nothing to do",
    "scale": "5. Scale: idle long-polls held by one server (SQLite) and by 2 replicas (Postgres)",
    "locality": "6. Locality: jobs reading a Ref held on host A, one worker on A and one on B",
    "depth": "7. Depth: every verb at depth 0 and N queued (note: ratio to depth 0, target)",
    "concurrency": "8. Concurrency: 16 producer processes calling a no-op in a loop, 2 workers"
    " (calls/s higher is better; p50/p99 lower)",
    "map": "9. Map: no-op items through q.map / ray.get / celery group, 2 workers"
    " (items/s, higher is better)",
    "placement": "10. Placement: 1-GPU jobs on a declared 8-GPU daemon vs 8 static slots"
    " (jobs/s, higher is better)",
    "lateness": "11. Lateness: delayed jobs claimed after their due time, 100k others scheduled"
    " (ms, lower is better)",
    "runtime": "12. Runtime: a 50 MiB workdir shipped to a daemon, submit to the job's first"
    " line (ms, lower is better)",
    "envs": "13. Environments: a job's requirements built on the daemon, submit to first line"
    " (ms, lower is better)",
    "gangs": "14. Gangs: a 2-node job's start skew, one part's kill -9 to the other's end, and"
    " a gang part's claim at depth beside a one-box claim (lower is better)",
    "channel": "15. Channel: the daemon's --channel modes, q.call and cancel --kill to the job's"
    " end (ms, lower is better)",
}


def _fmt(v: float) -> str:
    if v != v:  # nan
        return "-"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _baseline(ms: list[Any], suite: str, m: Any) -> Any:
    for name in BASELINES.get(suite, ()):
        for other in ms:
            same_group = other.metric == m.metric and (
                suite not in ("embedded",) or other.durability == m.durability
            )
            if other.system == name and same_group:
                return other
    return None


def _vs(m: Any, base: Any) -> str:
    if base is None or base is m or not base.median or not m.median:
        return ""
    better = base.median / m.median if m.lower_is_better else m.median / base.median
    return f"{better:.2f}x {base.system}"


def table_rows(ms: list[Any]) -> dict[str, list[list[str]]]:
    """Per suite, rows of [system, metric, median (min-max), vs, durability, n, note]."""
    out: dict[str, list[list[str]]] = {}
    for suite in SUITE_TITLES:
        members = [m for m in ms if m.suite == suite]
        members.sort(key=lambda m: (m.metric, not m.system.startswith("lakeshore"), m.system))
        rows = []
        for m in members:
            spread = f" ({_fmt(m.lo)}-{_fmt(m.hi)})" if len(m.values) > 1 else ""
            rows.append(
                [
                    m.system,
                    m.metric,
                    f"{_fmt(m.median)}{spread} {m.unit}",
                    _vs(m, _baseline(ms, suite, m)),
                    m.durability,
                    str(m.n or ""),
                    m.note,
                ]
            )
        if rows:
            out[suite] = rows
    return out


def _find(ms: list[Any], suite: str, metric: str, system: str, dur: str = "") -> Any:
    for m in ms:
        same = m.suite == suite and m.metric == metric and m.system == system
        if same and (not dur or m.durability == dur):
            return m
    return None


def _ratio_target(what: str, a: Any, b: Any, limit: float, against: str) -> list[list[str]]:
    """A target row "a within `limit` times b" (lower is better), or none when either is
    missing from this run."""
    if a is None or b is None:
        return []
    r = a.median / b.median
    shown = f"{r:.2f}x {against} ({_fmt(a.median)} vs {_fmt(b.median)} ms)"
    return [[what, shown, "met" if r <= limit else "MISSED"]]


def _plane_tier_rows(ms: list[Any]) -> list[list[str]]:
    """Issue 15: 64 MiB between two hosts through the plane within 2x of raw HTTP through the
    same server (both measured in bench/payload.py's `plane_tier`)."""
    return _ratio_target(
        "two hosts, plane tier: 64 MiB put + get within 2x of raw HTTP (issue 15)",
        _find(ms, "payload", "p50, 64 MiB", "lakeshore two hosts, plane tier: A put + B get"),
        _find(ms, "payload", "p50, 64 MiB", "floor: raw HTTP PUT+GET, same server"),
        2.0,
        "the floor",
    )


def _chain_rows(ms: list[Any]) -> list[list[str]]:
    """Issue 15: a chain of 5 jobs passing a 64 MiB Ref along within 1.2x of one hop."""
    system = "lakeshore http (sqlite), by Ref, host tier, a chain of {}"
    return _ratio_target(
        "a chain of 5 jobs passing a 64 MiB Ref within 1.2x of one hop (issue 15)",
        _find(ms, "payload", "p50, 64 MiB", system.format("5 jobs")),
        _find(ms, "payload", "p50, 64 MiB", system.format("1 job")),
        1.2,
        "one hop",
    )


def is_peer(system: str) -> bool:
    """Whether a row's system is another queue's (not Lakeshore's, not a floor)."""
    return not system.startswith(("lakeshore", "floor:"))


def _dispatch_rows(ms: list[Any]) -> list[list[str]]:
    """Issue 16: the call path against every peer, and as a multiple of its durable floor."""
    full, normal = "synchronous=FULL", "synchronous=NORMAL"
    rows: list[list[str]] = []
    # A peer's call is measured in the "rpc" suite beside Lakeshore's own rows and the floors.
    peers = [m for m in ms if m.suite == "rpc" and m.metric in ("p50", "p99") and is_peer(m.system)]
    for metric in ("p50", "p99"):
        http = _find(ms, "rpc", metric, "lakeshore http (sqlite)", full)
        rivals = [m for m in peers if m.metric == metric]
        if http is None or not rivals:
            continue
        best = min(rivals, key=lambda m: m.median)
        rows.append(
            [
                f"HTTP on SQLite, FULL: q.call {metric} below every peer's (issue 16)",
                f"{_fmt(http.median)} ms vs {best.system} {_fmt(best.median)} ms",
                "met" if http.median < best.median else "MISSED",
            ]
        )
    http_normal = _find(ms, "rpc", "p50", "lakeshore http (sqlite)", normal)
    if http_normal is not None:
        rows.append(
            [
                "HTTP on SQLite, NORMAL: q.call p50 < 1 ms (issue 16)",
                f"{_fmt(http_normal.median)} ms",
                "met" if http_normal.median < 1.0 else "MISSED",
            ]
        )
    http = _find(ms, "rpc", "p50", "lakeshore http (sqlite)", full)
    pg = _find(ms, "rpc", "p50", "lakeshore http (postgres)")
    if http is not None and pg is not None:
        r = pg.median / http.median
        rows.append(
            [
                "HTTP on Postgres: q.call p50 within 1.5x of HTTP on SQLite (issue 16)",
                f"{r:.2f}x ({_fmt(pg.median)} vs {_fmt(http.median)} ms)",
                "met" if r <= 1.5 else "MISSED",
            ]
        )
    for system, floor_name in (
        ("lakeshore http (sqlite)", SQLITE_FLOOR),
        ("lakeshore embedded 2-proc", SQLITE_FLOOR),
        ("lakeshore http (postgres)", POSTGRES_FLOOR),
    ):
        call = _find(ms, "rpc", "p50", system, full if "sqlite" in floor_name else "")
        if call is None and "postgres" in system:
            call = _find(ms, "rpc", "p50", system)
        floor = _find(ms, "rpc", "p50", floor_name)
        if call is not None and floor is not None:
            rows.append(
                [
                    f"{system} q.call p50 as a multiple of its durable floor (not a target)",
                    f"{call.median / floor.median:.2f}x ({_fmt(call.median)} vs "
                    f"{_fmt(floor.median)} ms)",
                    "",
                ]
            )
    store = _find(ms, "rpc", "p50", STORE_ALONE)
    for system in ("lakeshore http (sqlite)", "lakeshore embedded 2-proc"):
        call = _find(ms, "rpc", "p50", system, full)
        if call is not None and store is not None:
            rows.append(
                [
                    f"{system} q.call p50 outside the store's own 2 transactions (not a target)",
                    f"{_fmt(call.median - store.median)} ms ({_fmt(call.median)} vs "
                    f"{_fmt(store.median)} ms for the store alone)",
                    "",
                ]
            )
    return rows


def targets(ms: list[Any]) -> list[list[str]]:
    """The targets of DESIGN.md and issue 10, each computed from this run's figures."""
    full, normal = "synchronous=FULL", "synchronous=NORMAL"
    rows: list[list[str]] = []

    def ratio_row(what: str, a: Any, b: Any, goal: float, lower_better: bool) -> None:
        if a is None or b is None:
            rows.append([what, "not measured", ""])
            return
        r = b.median / a.median if lower_better else a.median / b.median
        rows.append(
            [
                what,
                f"{r:.2f}x ({_fmt(a.median)} vs {_fmt(b.median)} {a.unit})",
                "met" if r >= goal else "MISSED",
            ]
        )

    def abs_row(what: str, a: Any, limit: float) -> None:
        if a is None:
            rows.append([what, "not measured", ""])
            return
        rows.append([what, f"{_fmt(a.median)} {a.unit}", "met" if a.median < limit else "MISSED"])

    http = _find(ms, "rpc", "p50", "lakeshore http (sqlite)", full)
    abs_row("HTTP q.call p50 < 1 ms (DESIGN)", http, 1.0)
    ratio_row(
        "HTTP q.call p50 at or below Ray's (>= 1x)",
        http,
        _find(ms, "rpc", "p50", "ray (local tasks)"),
        1.0,
        True,
    )
    rows += _dispatch_rows(ms)
    for dur in (full, normal):
        abs_row(
            f"embedded 2-proc q.call p50 < 1 ms, {dur}",
            _find(ms, "rpc", "p50", "lakeshore embedded 2-proc", dur),
            1.0,
        )
    abs_row(
        "idle daemon CPU < 1% of a core", _find(ms, "idle", "cpu", "lakeshore embedded 2-proc"), 1.0
    )
    for dur in (full, normal):
        ratio_row(
            f"embedded drain >= 2x SqliteHuey, {dur} (batched as a daemon with --prefetch)",
            _find(ms, "embedded", "drain", "lakeshore batched 64", dur),
            _find(ms, "embedded", "drain", "huey (SqliteHuey)", dur),
            2.0,
            False,
        )
        ratio_row(
            f"embedded submit >= 3x SqliteHuey, {dur} (DESIGN)",
            _find(ms, "embedded", "submit", "lakeshore", dur),
            _find(ms, "embedded", "submit", "huey (SqliteHuey)", dur),
            3.0,
            False,
        )
    raw = _find(ms, "embedded", "submit", "raw sqlite insert", full)
    single = _find(ms, "embedded", "submit", "lakeshore", full)
    if raw and single:
        r = raw.median / single.median
        rows.append(
            [
                "single submit within 1.5x of the raw SQLite commit floor, FULL",
                f"{r:.2f}x the floor",
                "met" if r <= 1.5 else "MISSED",
            ]
        )
    rows += _plane_tier_rows(ms)
    rows += _chain_rows(ms)
    fan = _find(ms, "fanout", "complete", "lakeshore http (sqlite)", full)
    ratio_row(
        "HTTP fan-out, 2 daemons >= 5x RQ (SimpleWorker)",
        fan,
        _find(ms, "fanout", "complete", "rq (SimpleWorker)"),
        5.0,
        False,
    )
    ratio_row(
        "HTTP fan-out, 2 daemons ahead of Ray (> 1x)",
        fan,
        _find(ms, "fanout", "complete", "ray (local tasks)"),
        1.0,
        False,
    )
    for peer in ("celery (redis)", "dramatiq (redis, results)"):
        ratio_row(
            f"HTTP fan-out ahead of {peer} (DESIGN)",
            fan,
            _find(ms, "fanout", "complete", peer),
            1.0,
            False,
        )
    for peer in ("procrastinate", "pgqueuer batch 10"):
        ratio_row(
            f"Postgres plane drain ahead of {peer}",
            _find(ms, "postgres", "drain", "lakeshore"),
            _find(ms, "postgres", "drain", peer),
            1.0,
            False,
        )
    for m in ms:
        if m.suite == "scale" and m.metric.startswith("claim p99,") and "idle polls" in m.metric:
            where = m.metric.replace("claim p99, ", "")
            abs_row(f"{where}, {m.system}: claim p99 < 50 ms (DESIGN)", m, 50.0)
    return rows


def _markdown(headers: list[str], rows: list[list[str]]) -> str:
    def esc(c: str) -> str:
        return c.replace("|", "\\|")

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


HEADERS = ["system", "metric", "median (min-max)", "vs peer", "durability", "n", "note"]


def write_results(
    out: Any, ms: list[Any], left_out: list[dict[str, str]], meta: dict[str, Any]
) -> None:
    from pathlib import Path

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    data = {"meta": meta, "left_out": left_out, "measurements": [m.as_dict() for m in ms]}
    (out / "results.json").write_text(json.dumps(data, indent=1, default=str))
    suites = table_rows(ms)
    goal_rows = targets(ms)
    md = [
        "# Lakeshore benchmarks (generated by `make bench`; do not edit)",
        "",
        f"Run {meta['started']}, {meta['seconds']} s, {meta['machine']}, Python {meta['python']}"
        + (" — QUICK smoke run" if meta.get("quick") else "")
        + f". Load average at the end: {', '.join(f'{x:.2f}' for x in meta['load_average_at_end'])}"
        " (the box is shared: compare ratios within this run, not figures across runs).",
        "",
        "![chart](chart.png)",
        "",
        "## Targets",
        "",
        _markdown(["target", "this run", ""], goal_rows),
    ]
    for suite, rows in suites.items():
        md += ["", f"## {SUITE_TITLES[suite]}", "", _markdown(HEADERS, rows)]
    if left_out:
        md += ["", "## Left out", ""]
        md += [f"- {x['suite']}: {x['system']}: {x['reason']}" for x in left_out]
    (out / "table.md").write_text("\n".join(md) + "\n")
    chart(out / "chart.png", ms)
    console = Console(width=200)
    goals = Table(title="Targets (this run)")
    for col in ("target", "this run", ""):
        goals.add_column(col)
    for r in goal_rows:
        goals.add_row(*r)
    console.print(goals)
    table = Table(title="Lakeshore vs peers, medians (min-max) of this run", show_lines=False)
    for col in ["suite", *HEADERS]:
        table.add_column(col, overflow="fold")
    for suite, rows in suites.items():
        for r in rows:
            table.add_row(suite, *r)
        table.add_section()
    console.print(table)
    for x in left_out:
        console.print(f"left out: {x['suite']}: {x['system']}: {x['reason']}")


def chart(path: Any, ms: list[Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("RPC q.call p50, ms (log; lower is better)", "rpc", "p50", True),
        ("Fan-out completion, jobs/s (higher is better)", "fanout", "complete", False),
        ("Embedded drain, ops/s (higher is better)", "embedded", "drain", False),
        ("Embedded submit, ops/s (log; higher is better)", "embedded", "submit", True),
    ]
    fig, axes = plt.subplots(2, 2, figsize=(16, 11))
    for ax, (title, suite, metric, log) in zip(axes.flat, panels, strict=False):
        members = [m for m in ms if m.suite == suite and m.metric == metric]
        members.sort(key=lambda m: m.median, reverse=not members or not members[0].lower_is_better)
        labels = [f"{m.system} [{m.durability.replace('synchronous=', '')[:28]}]" for m in members]
        med = [m.median for m in members]
        err = [[m.median - m.lo for m in members], [m.hi - m.median for m in members]]
        colors = ["#1f77b4" if m.system.startswith("lakeshore") else "#bbbbbb" for m in members]
        ax.barh(range(len(members)), med, xerr=err, color=colors, capsize=2)
        ax.set_yticks(range(len(members)))
        ax.set_yticklabels(labels, fontsize=7)
        ax.invert_yaxis()
        if log and members:
            ax.set_xscale("log")
        ax.set_title(title, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle("Lakeshore (blue) vs peers, this run's medians with min-max", fontsize=12)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
