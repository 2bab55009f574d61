"""A producer's own code reaches a daemon that shares none of it (issue 46): the reproduction.

The producer is a script in its project folder (`myproj/features.py`, `mytasks.py`); the daemon
runs in an empty folder with nothing of the project on its path. Without shipping, the job fails
with `No module named 'myproj'`; with it (the default), it returns 18, and 30 once the producer
edits its module and submits again.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemons import DaemonProcess, daemon_env

FEATURES = "def scale(x):\n    return {factor} * x\n"
TASKS = """\
import dreamlake.lakeshore as dls
from myproj.features import scale


@dls.udf(queue="ct")
def double(x):
    return 2 * scale(x)
"""
PRODUCER = """\
import importlib, json, sys, time
from pathlib import Path
import dreamlake.lakeshore as dls
import mytasks
import myproj.features

q = dls.SyncQueue("ct")
out = {}
out["udf"] = q.result(mytasks.double.submit(3), timeout=60)
out["thunk"] = q.result(q.submit(dls.thunk(mytasks.double.fn, 4)), timeout=60)
out["map"] = list(q.map(mytasks.double.fn, [1, 2]))
job = mytasks.double.submit(1)
q.result(job, timeout=60)
out["shipped"] = q.status(job).runtime
Path("myproj/features.py").write_text("def scale(x):\\n    return 5 * x\\n")
importlib.reload(myproj.features)
importlib.reload(mytasks)
out["edited"] = q.result(mytasks.double.submit(3), timeout=60)
off = mytasks.double.submit(3, _runtime=dls.Runtime(include_source=False))
try:
    q.result(off, timeout=60)
    out["off"] = "succeeded"
except dls.DispatchError as exc:
    out["off"] = str(exc)
print(json.dumps(out))
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "myproj").mkdir(parents=True)
    (root / "myproj" / "__init__.py").write_text("")
    (root / "myproj" / "features.py").write_text(FEATURES.format(factor=3))
    (root / "mytasks.py").write_text(TASKS)
    (root / "produce.py").write_text(PRODUCER)
    return root


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[Path, DaemonProcess]]:
    home = tmp_path / "home"
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    proc = DaemonProcess(home, "box-ct", ["--queue", "ct", "--concurrency", "1"], cwd=empty)
    try:
        proc.ready()
        yield home, proc
    finally:
        proc.stop()


def _produce(project: Path, home: Path, extra: dict[str, str] | None = None) -> dict:
    env = daemon_env(home, extra)
    env.pop("PYTHONPATH", None)  # the producer imports its own folder, as a user's would
    done = subprocess.run(
        [sys.executable, "produce.py"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_producers_own_modules_ship_to_a_daemon_in_another_folder(project, daemon) -> None:
    home, _ = daemon
    out = _produce(project, home)
    assert out["udf"] == 18
    assert out["thunk"] == 24
    assert out["map"] == [6, 12]
    shipped = out["shipped"]
    assert shipped["sources"] == ["myproj", "mytasks"]
    assert shipped["bundle"].startswith("sha256:") and shipped["files"] == 3
    assert out["edited"] == 30, "the job ran the module a child held from the last job"
    assert "No module named 'myproj'" in out["off"]


def test_the_same_over_http(project, tmp_path, server, tenant) -> None:
    home = tmp_path / "home-http"
    empty = tmp_path / "elsewhere-http"
    empty.mkdir()
    env = {
        "LAKESHORE_URL": server.url,
        "LAKESHORE_TOKEN": tenant.token,
        "LAKESHORE_NAMESPACE": tenant.namespace,
    }
    proc = DaemonProcess(
        home, "box-ct-http", ["--queue", "ct", "--concurrency", "1"], env=env, cwd=empty
    )
    try:
        proc.ready()
        out = _produce(project, tmp_path / "producer-home", env)
    finally:
        proc.stop()
    assert (out["udf"], out["thunk"], out["map"], out["edited"]) == (18, 24, [6, 12], 30)
    assert "No module named 'myproj'" in out["off"]


def test_lakeshore_jobs_show_lists_what_shipped(project, daemon) -> None:
    home, _ = daemon
    script = textwrap.dedent(
        """
        import dreamlake.lakeshore as dls, mytasks
        job = mytasks.double.submit(2)
        dls.SyncQueue("ct").result(job, timeout=60)
        print(job)
        """
    )
    env = daemon_env(home)
    env.pop("PYTHONPATH", None)
    job = subprocess.run(
        [sys.executable, "-c", script], cwd=project, env=env, capture_output=True, text=True
    )
    assert job.returncode == 0, job.stderr[-3000:]
    inv_id = job.stdout.split()[-1]
    shown = subprocess.run(
        [str(Path(sys.executable).parent / "lakeshore"), "jobs", "show", inv_id],
        env=env,
        capture_output=True,
        text=True,
    )
    assert shown.returncode == 0, shown.stderr
    assert "myproj, mytasks" in shown.stdout and "sha256:" in shown.stdout


TRAIN_ARGV = ("python", "train.py", "--lr", "3e-4")
TRAIN = """\
import pathlib, sys
print("training with", *sys.argv[1:])
pathlib.Path("metrics.txt").write_text("loss 0.1\\n")
print("wrote", pathlib.Path("metrics.txt").resolve().parent.name == pathlib.Path.cwd().name)
"""


def test_exec_with_a_workdir_runs_a_script_only_the_producer_has(tmp_path, daemon) -> None:
    home, _ = daemon
    folder = tmp_path / "train-project"
    folder.mkdir()
    (folder / "train.py").write_text(TRAIN)
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    env = daemon_env(home)
    env.pop("PYTHONPATH", None)
    lakeshore = str(Path(sys.executable).parent / "lakeshore")
    done = subprocess.run(
        [lakeshore, "exec", "--wait", "--workdir", str(folder), "-q", "ct", "--", *TRAIN_ARGV],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "training with --lr 3e-4" in done.stdout
    assert "wrote True" in done.stdout
    # the job wrote into its own folder on the box, not the producer's, not the shared tree
    assert not (folder / "metrics.txt").exists()
    trees = list((home / "runtime" / "bundles" / "trees").iterdir())
    assert trees and not any((t / "workdir" / "metrics.txt").exists() for t in trees)
    assert not any((t / "workdir" / ".git").exists() for t in trees)


def test_requirements_are_built_once_per_box_with_uv_from_the_boxs_own_wheels(
    tmp_path: Path,
) -> None:
    """No registry: the daemon's box finds packages in a local folder (`UV_FIND_LINKS`, with
    `UV_OFFLINE=1`), as its operator set it; the job names only what it needs."""
    import importlib.metadata

    import dreamlake.lakeshore as dls
    from dreamlake.lakeshore.plane import Dispatch
    from tests.support.wheels import write_wheel

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    write_wheel(wheels, "tinypkg", "1.0")
    home = tmp_path / "home-env"
    box = {
        "UV_FIND_LINKS": str(wheels),
        "UV_OFFLINE": "1",
        "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
    }
    proc = DaemonProcess(
        home, "box-env", ["--queue", "envs", "--concurrency", "1"], env=box, cwd=tmp_path
    )
    try:
        proc.ready()
        with Dispatch(str(home / "lakeshore.db")) as plane:
            q = dls.SyncQueue("envs", dispatch=plane)
            version = dls.thunk(importlib.metadata.version, "tinypkg")
            wants = dls.Runtime(requirements=["tinypkg==1.0"])
            first = q.submit(version, runtime=wants)
            assert q.result(first, timeout=120) == "1.0"
            second = q.submit(version, runtime=wants)
            assert q.result(second, timeout=60) == "1.0"
            ready = {e["invocation"]: e["built"] for e in proc.find_all("job.runtime_ready")}
            assert (ready[first], ready[second]) == (True, False), "the second job rebuilt"

            missing = q.submit(version, runtime=dls.Runtime(requirements=["tinypkg==9.9"]))
            row = plane.invocation(missing, wait_s=60)
            assert (row.state, row.ended_by) == ("failed", "runtime")
            assert "tinypkg==9.9" in (row.error or "")

            numpy = q.submit(version, runtime=dls.Runtime(requirements=["numpy==1.0"]))
            row = plane.invocation(numpy, wait_s=60)
            assert (row.state, row.ended_by) == ("failed", "runtime")
            assert "numpy" in (row.error or "") and "daemon" in (row.error or "")
    finally:
        proc.stop()


IMPORTS = ("--", "python", "-c", "import tinypkg; print(tinypkg.VALUE)")


def held_box(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A box whose uv (`LAKESHORE_UV`) waits at a gate the test opens (touches): a build is
    under way for as long as the test looks. Its packages: one local wheel, `tinypkg`."""
    from tests.support.wheels import write_wheel

    wheels = tmp_path / "wheels"
    wheels.mkdir(exist_ok=True)
    write_wheel(wheels, "tinypkg", "1.0")
    gate = tmp_path / "go"
    held_uv = tmp_path / "held-uv"
    real_uv = Path(sys.executable).parent / "uv"
    held_uv.write_text(
        f'#!/bin/sh\nwhile [ ! -e "{gate}" ]; do sleep 0.05; done\nexec "{real_uv}" "$@"\n'
    )
    held_uv.chmod(0o755)
    box = {
        "UV_FIND_LINKS": str(wheels),
        "UV_OFFLINE": "1",
        "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
        "LAKESHORE_UV": str(held_uv),
    }
    return gate, box


def test_while_its_environment_builds_the_row_and_exec_wait_say_so(tmp_path: Path) -> None:
    import re

    from tests.support.daemons import wait_until

    gate, box = held_box(tmp_path)
    home = tmp_path / "home-held"
    proc = DaemonProcess(home, "box-held", ["--queue", "held"], env=box, cwd=tmp_path)
    lakeshore = str(Path(sys.executable).parent / "lakeshore")
    env = daemon_env(home)
    env.pop("PYTHONPATH", None)
    err = tmp_path / "exec.err"
    try:
        proc.ready()
        with open(err, "wb") as stderr:
            job = subprocess.Popen(
                [lakeshore, "exec", "--wait", "-q", "held", "--with", "tinypkg==1.0", *IMPORTS],
                env=env,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                cwd=tmp_path,
            )
            said = wait_until(
                lambda: re.search(r"# (\w+): building its environment", err.read_text()),
                timeout=60,
                what="exec --wait's progress line",
            )
            shown = subprocess.run(
                [lakeshore, "jobs", "show", said.group(1)], env=env, capture_output=True, text=True
            )
            assert "preparing" in shown.stdout and "environment" in shown.stdout, shown.stdout
            gate.touch()
            out, _ = job.communicate(timeout=120)
        assert job.returncode == 0, err.read_text()
        assert out.strip() == "tinypkg 1.0"
        shown = subprocess.run(
            [lakeshore, "jobs", "show", said.group(1)], env=env, capture_output=True, text=True
        )
        assert "preparing" not in shown.stdout  # put back as it was once ready
    finally:
        gate.touch()
        proc.stop()


def test_eight_jobs_claimed_at_once_build_their_environment_once(tmp_path: Path) -> None:
    import importlib.metadata

    import dreamlake.lakeshore as dls
    from dreamlake.lakeshore.plane import Dispatch
    from tests.support.daemons import wait_until

    gate, box = held_box(tmp_path)
    home = tmp_path / "home-eight"
    proc = DaemonProcess(home, "box-8", ["--queue", "eight", "--concurrency", "8"], env=box)
    try:
        proc.ready()
        with Dispatch(str(home / "lakeshore.db")) as plane:
            q = dls.SyncQueue("eight", dispatch=plane)
            wants = dls.Runtime(requirements=["tinypkg==1.0"])
            version = dls.thunk(importlib.metadata.version, "tinypkg")
            jobs = q.submit_many([version] * 8, runtime=wants)
            wait_until(lambda: q.count("running") == 8, timeout=60, what="eight jobs held")
            gate.touch()
            assert [q.result(j, timeout=120) for j in jobs] == ["1.0"] * 8
        built = [e["built"] for e in proc.find_all("job.runtime_ready")]
        assert sorted(built) == [False] * 7 + [True], built
    finally:
        gate.touch()
        proc.stop()


def test_a_daemon_killed_mid_build_leaves_nothing_the_next_one_uses(tmp_path: Path) -> None:
    import importlib.metadata

    import dreamlake.lakeshore as dls
    from dreamlake.lakeshore.plane import Dispatch
    from tests.support.daemons import wait_until

    gate, box = held_box(tmp_path)
    home = tmp_path / "home-killed"
    args = ["--queue", "killed", "--lease-s", "2"]
    first = DaemonProcess(home, "box-k1", args, env=box)
    try:
        first.ready()
        with Dispatch(str(home / "lakeshore.db")) as plane:
            q = dls.SyncQueue("killed", dispatch=plane)
            job = q.submit(
                dls.thunk(importlib.metadata.version, "tinypkg"),
                runtime=dls.Runtime(requirements=["tinypkg==1.0"]),
            )
            envs = home / "runtime" / "envs"
            wait_until(
                lambda: any((envs / "tmp").glob("*")) if (envs / "tmp").exists() else False,
                timeout=60,
                what="a build under way",
            )
            first.kill9()
            gate.touch()
            second = DaemonProcess(home, "box-k2", args, env=box)
            try:
                second.ready()
                assert q.result(job, timeout=120) == "1.0"  # after the lease ran out: rebuilt
                row = plane.invocation(job)
                assert row.attempt == 2 and row.worker is not None
                assert second.find("job.runtime_ready", invocation=job)["built"] is True
            finally:
                second.stop()
    finally:
        gate.touch()
        first.stop()


def test_a_build_longer_than_the_lease_keeps_its_lease(tmp_path: Path) -> None:
    """A 10-minute build is not a lost worker: the lease is renewed while the environment is
    built, and the job runs once, in its first attempt."""
    import importlib.metadata

    import httpx

    import dreamlake.lakeshore as dls
    from dreamlake.lakeshore.plane import Dispatch
    from tests.support.daemons import wait_until
    from tests.support.server import free_port

    def renewals(port: int) -> float:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5.0).text
        found = [
            ln
            for ln in text.splitlines()
            if ln.startswith("lakeshore_daemon_lease_renewals_total ")
        ]
        return float(found[0].split()[1]) if found else 0.0

    gate, box = held_box(tmp_path)
    home = tmp_path / "home-lease"
    port = free_port()
    box |= {"LAKESHORE_DAEMON_METRICS_PORT": str(port)}
    args = ["--queue", "lease", "--lease-s", "1", "--metrics-addr", "127.0.0.1"]
    proc = DaemonProcess(home, "box-lease", args, env=box)
    try:
        proc.ready()
        proc.wait_for("daemon.metrics_serving")
        with Dispatch(str(home / "lakeshore.db")) as plane:
            q = dls.SyncQueue("lease", dispatch=plane)
            job = q.submit(
                dls.thunk(importlib.metadata.version, "tinypkg"),
                runtime=dls.Runtime(requirements=["tinypkg==1.0"]),
            )
            wait_until(lambda: q.count("running") == 1, timeout=60, what="the job held")
            before = renewals(port)
            # several leases' worth of renewals while uv is held: the build outlives its lease
            wait_until(lambda: renewals(port) >= before + 8, timeout=60, what="renewals")
            assert q.status(job).attempt == 1
            gate.touch()
            assert q.result(job, timeout=120) == "1.0"
            assert q.status(job).attempt == 1  # never taken back and run again
        assert len(proc.find_all("job.claimed", invocation=job)) == 1
    finally:
        gate.touch()
        proc.stop()
