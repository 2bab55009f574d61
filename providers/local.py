"""`local`: daemons as processes on the control host, for one box and for the end-to-end tests.

Each launch starts `python -m dreamlake.lakeshore.daemon` in its own session (so a Ctrl-C of the
controller does not reach it) and writes `<state_dir>/<id>.json` with its pid, the pid's start
time and its tags. `list()` re-reads those files and keeps the ones whose process is still the
same process (pid and start time: a reused pid is not ours), so a restarted controller, or the
CLI that launched them, still knows them; files of exited processes are removed there.

`terminate` sends SIGTERM, which a daemon takes as "drain": finish, release, leave. A process
still there `kill_after_s` later gets SIGKILL on the next `terminate` or `list`.

Config: `state_dir` (default `$LAKESHORE_HOME/providers/<name>`), `concurrency`, `lease_s`,
`args` (extra daemon arguments), `env` (extra environment), `kill_after_s`, `shape` (what each
daemon offers, declared to it as `--gpus N --gpu-type T --gpu-memory-gb G --cpus C --memory-gb M`:
the whole GPU path runs on a CPU box).
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import secrets
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dreamlake.lakeshore.home import home
from dreamlake.lakeshore.shapes import launch_shape

from .base import Instance, LaunchSpec, ProviderError, matches

KILL_AFTER_S = 30.0


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot, or None if it is gone (or a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else fields[19]


class LocalProvider:
    def __init__(self, name: str, config: Mapping[str, Any] | None = None) -> None:
        self.name = name
        config = dict(config or {})
        self.state_dir = Path(config.get("state_dir") or home() / "providers" / name)
        self.kill_after_s = float(config.get("kill_after_s", KILL_AFTER_S))
        self.config = config
        #: Children we started in this process: polled so that they never linger as zombies.
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    # -- the Protocol -------------------------------------------------------------------------

    def launch(self, spec: LaunchSpec, count: int) -> list[Instance]:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        return [self._start(spec, daemon) for daemon in spec.daemon_names(count)]

    def terminate(self, ids: Sequence[str]) -> None:
        now = time.time()
        for inst_id in ids:
            record = self._read(inst_id)
            if record is None:
                continue
            if not self._alive(record):
                self._forget(inst_id)
                continue
            first = record.get("terminating_at") is None
            sig = signal.SIGTERM if first else signal.SIGKILL
            if first:
                record["terminating_at"] = now
                self._write(record)
            elif now - record["terminating_at"] < self.kill_after_s:
                continue  # still draining on the first SIGTERM
            with contextlib.suppress(ProcessLookupError):
                os.kill(record["pid"], sig)

    def list(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
        for child in list(self._children.values()):
            if child.poll() is not None:  # reap
                self._children.pop(child.pid, None)
        out: list[Instance] = []
        if not self.state_dir.exists():
            return out
        for path in sorted(self.state_dir.glob("*.json")):
            record = self._read(path.stem)
            if record is None:
                continue
            if not self._alive(record):
                self._forget(path.stem)
                continue
            terminating = record.get("terminating_at")
            if terminating is not None and time.time() - terminating >= self.kill_after_s:
                self.terminate([path.stem])
            if matches(record["tags"], tags):
                out.append(
                    Instance(
                        id=record["id"],
                        tags=record["tags"],
                        launched_at=record["launched_at"],
                        state="terminating" if terminating else "running",
                    )
                )
        return out

    # -- processes and state files ------------------------------------------------------------

    def _command(self, spec: LaunchSpec, daemon: str) -> builtins.list[str]:
        settings = {**self.config, **spec.settings}
        cmd = [sys.executable, "-m", "dreamlake.lakeshore.daemon", "--name", daemon, "--log-json"]
        for q in spec.queues:
            cmd += ["--queue", q]
        cmd += ["--namespace", spec.namespace]
        if "concurrency" in settings:
            cmd += ["--concurrency", str(int(settings["concurrency"]))]
        if "lease_s" in settings:
            cmd += ["--lease-s", str(float(settings["lease_s"]))]
        shape = launch_shape("local", settings)
        if shape is not None:  # declared, so a CPU box offers the shape the controller sized on
            cmd += shape.daemon_args()
        labels = {**dict(settings.get("labels") or {}), **spec.labels}
        for key, value in sorted(labels.items()):
            cmd += ["--label", f"{key}={value}"]
        args = settings.get("args", [])
        # A command line typed as one string (`--set args="--concurrency 2"`) is split like a
        # shell would, never character by character.
        cmd += shlex.split(args) if isinstance(args, str) else [str(a) for a in args]
        return cmd

    def _env(self, spec: LaunchSpec) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESHORE_")}
        env.update({str(k): str(v) for k, v in dict(self.config.get("env") or {}).items()})
        url = spec.plane_url
        if url and url.startswith(("http://", "https://")):
            env["LAKESHORE_URL"] = url
            if spec.plane_token:
                env["LAKESHORE_TOKEN"] = spec.plane_token
        elif url:  # a SQLite file: the daemon's embedded plane is $LAKESHORE_HOME/lakeshore.db
            path = Path(url.removeprefix("sqlite:///"))
            if path.name != "lakeshore.db":
                raise ProviderError(
                    f"local daemons open $LAKESHORE_HOME/lakeshore.db; cannot point them at {path}"
                    " (name the file lakeshore.db, or serve it with `lakeshore server`)"
                )
            env["LAKESHORE_HOME"] = str(path.parent)
        else:
            env["LAKESHORE_HOME"] = os.environ.get("LAKESHORE_HOME") or str(home())
        return env

    def _start(self, spec: LaunchSpec, daemon: str) -> Instance:
        inst_id = f"local-{daemon}-{secrets.token_hex(3)}"
        log_path = self.state_dir / f"{inst_id}.log"
        with log_path.open("wb") as log:
            try:
                proc = subprocess.Popen(
                    self._command(spec, daemon),
                    env=self._env(spec),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                raise ProviderError(f"cannot start a local daemon: {exc}") from exc
        self._children[proc.pid] = proc
        record: dict[str, Any] = {
            "id": inst_id,
            "pid": proc.pid,
            "start": _start_time(proc.pid),
            "tags": spec.tags(daemon, self.name),
            "launched_at": time.time(),
            "log": str(log_path),
        }
        self._write(record)
        return Instance(id=inst_id, tags=record["tags"], launched_at=record["launched_at"])

    def _alive(self, record: dict[str, Any]) -> bool:
        child = self._children.get(record["pid"])
        if child is not None:
            # Our own child is alive until reaped: its pid cannot be reused before, and its
            # /proc entry can read "Z" while its other threads still exit (not yet reapable),
            # which would forget it unreaped.
            return child.poll() is None
        start = _start_time(record["pid"])
        return start is not None and (record.get("start") is None or start == record["start"])

    def _read(self, inst_id: str) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = json.loads((self.state_dir / f"{inst_id}.json").read_text())
        except (OSError, ValueError):
            return None
        return data

    def _write(self, record: dict[str, Any]) -> None:
        path = self.state_dir / f"{record['id']}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(path)  # atomic: a reader never sees half a record

    def _forget(self, inst_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.state_dir / f"{inst_id}.json").unlink()
