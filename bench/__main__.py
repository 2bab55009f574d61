"""`make bench`: Lakeshore beside its peers, every figure measured in this run, one table.

    .venv/bin/python -m bench [--quick] [--only rpc,fanout,embedded,postgres,scale] [--skip ...]
                              [--systems SUBSTR,...] [--out bench/results]

Writes bench/results/results.json (every repetition), table.md (the table printed here) and
chart.png. Each suite runs its warm-up, then `reps` repetitions; the table shows medians with
min-max and ratios against a named peer of the same run. A peer that cannot run here (not
installed, service down) is listed as left out, with the reason; the run goes on without it.
Everything stops by itself and talks only to 127.0.0.1. `--quick` is a smoke run (~3 min).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from .common import ROOT, Measurement, Settings, clean_env, say

Job = tuple[str, str, Callable[[Settings], list[Measurement]]]


def jobs() -> list[Job]:
    """(suite, system label, run) in the order they run."""
    from . import embedded, scale
    from . import lakeshore_runs as ls
    from .peers import runs as peer

    out: list[Job] = []
    for plane, modes in (
        ("http-sqlite", (False, True)),
        ("http-postgres", (False,)),
        ("embedded", (False, True)),
        ("embedded-xproc", (False, True)),
    ):
        for normal in modes:
            label = f"lakeshore {plane}{' NORMAL' if normal else ''}"
            out.append(("rpc", label, lambda s, p=plane, n=normal: ls.rpc(s, p, n)))
    from . import durable_floor

    out.append(("rpc", "floor: durable commits, sqlite and postgres", durable_floor.measure))
    from . import store_call

    out.append(("rpc", store_call.SYSTEM, store_call.measure))
    for plane, modes in (
        ("http-sqlite", (False, True)),
        ("embedded-xproc", (False, True)),
        ("http-postgres", (False,)),
    ):
        for normal in modes:
            label = f"lakeshore {plane}{' NORMAL' if normal else ''}"
            out.append(("fanout", label, lambda s, p=plane, n=normal: ls.fanout(s, p, n)))
    out.append(
        (
            "fanout",
            "lakeshore http-sqlite prefetch 0",
            lambda s: ls.fanout(s, "http-sqlite", prefetch=0),
        )
    )
    peers: list[tuple[str, Callable[[Settings], list[Measurement]]]] = [
        ("celery redis", lambda s: peer.celery(s, "redis")),
        ("celery rabbitmq", lambda s: peer.celery(s, "rabbitmq")),
        ("rq SimpleWorker", lambda s: peer.rq(s, "rq.worker.SimpleWorker")),
        ("rq Worker", lambda s: peer.rq(s, "rq.worker.Worker")),
        ("dramatiq", peer.dramatiq),
        ("huey default", lambda s: peer.huey(s, fast_poll=False, fsync=False)),
        ("huey 1ms", lambda s: peer.huey(s, fast_poll=True, fsync=False)),
        ("huey 1ms fsync", lambda s: peer.huey(s, fast_poll=True, fsync=True)),
        ("arq default", lambda s: peer.arq(s, 0.5)),
        ("arq 1ms", lambda s: peer.arq(s, 0.001)),
        ("ray", peer.ray),
    ]
    out += [("peers", label, run) for label, run in peers]
    from . import payload

    out += [
        ("payload", "lakeshore http payloads", payload.lakeshore),
        ("payload", "rq payloads", payload.rq),
        ("payload", "ray payloads", payload.ray),
        ("payload", "floors (memcpy, tobytes, write+fsync+read)", payload.floors),
        ("payload", "lakeshore two hosts (plane tier), raw HTTP floor", payload.plane_tier),
    ]
    for label, reason in payload.left_out().items():
        out.append(("payload", label, lambda s, r=reason: _cannot(r)))
    from . import locality

    out.append(("locality", "lakeshore http, hosts A and B", locality.measure))
    from . import mapping

    out.append(("map", "lakeshore http (sqlite), q.map of no-ops", mapping.measure))
    out.append(("map", "celery redis, group / chunks", peer.celery_map))
    out.append(("map", "ray, ray.get of remote calls", peer.ray_map))
    from . import lateness

    out.append(("lateness", "lakeshore embedded sqlite, 100k scheduled", lateness.measure))
    out.append(("embedded", "sqlite plane vs huey vs raw sqlite", embedded.measure))
    out.append(("postgres", "postgres plane vs pgqueuer/procrastinate", embedded.measure_postgres))
    from . import depth

    out.append(("depth", "lakeshore sqlite, 0 vs N queued", depth.measure_sqlite))
    out.append(("depth", "lakeshore postgres, 0 vs N queued (scaled down)", depth.measure_postgres))
    from . import depth_resources

    out.append(("depth", "lakeshore sqlite, resource claims at N queued", depth_resources.measure))
    out.append(("scale", "idle long-polls", scale.measure))
    out.append(("scale", "idle long-polls, 2 postgres replicas", scale.measure_replicas))
    from . import placement

    out.append(("placement", "lakeshore declared 8-GPU daemon, gpus=1", placement.placed))
    out.append(("placement", "lakeshore 8 static slots, no request", placement.static))
    from . import concurrency as conc

    out += [
        ("concurrency", "lakeshore http-sqlite", lambda s: conc.lakeshore(s, "http-sqlite")),
        ("concurrency", "lakeshore http-postgres", lambda s: conc.lakeshore(s, "http-postgres")),
        ("concurrency", "celery redis", conc.celery),
        ("concurrency", "ray", conc.ray),
    ]
    from . import runtime_ship

    out += [
        ("runtime", "lakeshore embedded, 50 MiB workdir", runtime_ship.lakeshore),
        ("runtime", "floors (tar, copy)", runtime_ship.floors),
        ("runtime", "ray working_dir", runtime_ship.ray),
    ]
    from . import runtime_envs

    out += [
        ("envs", "lakeshore daemon environments", runtime_envs.lakeshore),
        ("envs", "floor: uv venv + uv pip install", runtime_envs.floor),
        ("envs", "ray runtime_env uv", runtime_envs.ray),
    ]
    from . import gangs

    out += [
        ("gangs", gangs.SYSTEM, gangs.lakeshore),
        ("gangs", gangs.PEER, gangs.torchrun),
        ("gangs", gangs.FLOOR, gangs.floor),
    ]
    from . import channel, gang_claim

    out.append(("channel", "lakeshore daemon channel modes", channel.measure))

    out += [
        ("gangs", gang_claim.SQLITE, gang_claim.sqlite),
        ("gangs", gang_claim.POSTGRES, gang_claim.postgres),
    ]
    return out


def _cannot(reason: str) -> list[Measurement]:
    """A peer this suite cannot measure: listed under "left out" with the reason."""
    raise RuntimeError(reason)


#: A job that runs longer than this is stopped (and reported as left out).
JOB_TIMEOUT_S = 420


def run_isolated(suite: str, label: str, settings: Settings) -> list[Measurement]:
    """Run one job in a child interpreter: peers keep global state (Celery apps, Dramatiq's
    broker, Ray), and a job that hangs is stopped without taking the run with it."""
    with tempfile.NamedTemporaryFile(suffix=".json") as result:
        argv = [sys.executable, "-m", "bench", "--job", f"{suite}/{label}", "--result-file"]
        argv += [result.name] + (["--quick"] if settings.quick else [])
        try:
            done = subprocess.run(
                argv,
                cwd=ROOT,
                env=clean_env(),
                timeout=JOB_TIMEOUT_S,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"stopped after {JOB_TIMEOUT_S}s") from None
        if done.returncode != 0:
            raise RuntimeError(done.stdout.decode(errors="replace").strip() or "no output")
        data = json.loads(Path(result.name).read_text())
    fields = {f.name for f in dataclasses.fields(Measurement)}
    return [Measurement(**{k: v for k, v in d.items() if k in fields}) for d in data]


def run_job(key: str, settings: Settings, result_file: str) -> None:
    for suite, label, run in jobs():
        if f"{suite}/{label}" == key:
            try:
                got = run(settings)
            except Exception:
                traceback.print_exc()
                sys.exit(1)
            Path(result_file).write_text(json.dumps([m.as_dict() for m in got]))
            return
    sys.exit(f"no job {key!r}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="a smoke run: fewer calls and jobs")
    parser.add_argument("--only", default="", help="suites to run (rpc,fanout,peers,...)")
    parser.add_argument("--skip", default="", help="suites to skip")
    parser.add_argument("--systems", default="", help="only jobs whose label has one of these")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args(argv)
    settings = Settings.make(args.quick)
    if args.job:
        run_job(args.job, settings, args.result_file)
        return
    only = {x for x in args.only.split(",") if x}
    skip = {x for x in args.skip.split(",") if x}
    systems = [x for x in args.systems.split(",") if x]
    measurements: list[Measurement] = []
    left_out: list[dict[str, str]] = []
    started = time.time()
    for suite, label, _ in jobs():
        if (only and suite not in only) or suite in skip:
            continue
        if systems and not any(x in label for x in systems):
            continue
        t0 = time.monotonic()
        say(f"[bench] {suite}: {label} ...")
        try:
            got = run_isolated(suite, label, settings)
        except Exception as exc:  # one peer that cannot run never sinks the others
            reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}"
            say(f"[bench]   left out: {reason}")
            left_out.append({"suite": suite, "system": label, "reason": reason})
            continue
        measurements += got
        say(f"[bench]   {len(got)} figures in {time.monotonic() - t0:.1f}s")
    from .report import write_results

    meta = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
        "seconds": round(time.time() - started, 1),
        "quick": settings.quick,
        "settings": settings.__dict__,
        "python": sys.version.split()[0],
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "load_average_at_end": os.getloadavg(),
    }
    out = Path(args.out)
    write_results(out, measurements, left_out, meta)
    print(json.dumps({"written": str(out), "seconds": meta["seconds"]}))


if __name__ == "__main__":
    main()
