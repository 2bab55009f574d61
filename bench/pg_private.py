"""A throwaway PostgreSQL server of this box's own installation, for figures that depend on how
the server is set up.

The shared test server on this machine runs with `autovacuum = off` in its configuration file;
the depth suite's question, whether dead tuples stay bounded while retention trims, is about a
server that runs autovacuum, as every server does by default. So it starts one: `initdb` into a
temporary folder, `postgres` on a free loopback port with the shipped defaults (autovacuum on),
stopped and deleted afterwards. As root it runs as the `postgres` user: initdb refuses root.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .common import free_port


def bin_dir() -> Path | None:
    """The newest installed server's programs (Debian keeps them out of PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@contextlib.contextmanager
def private_postgres() -> Iterator[str]:
    """The URL of a new server (database `postgres`, user `postgres`, trust on loopback)."""
    bindir = bin_dir()
    if bindir is None:
        raise RuntimeError("no PostgreSQL installation here (initdb not found)")
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="lakeshore-pg-") as scratch:
        data = Path(scratch) / "data"
        data.mkdir()
        if as_user:
            shutil.chown(scratch, "postgres")
            shutil.chown(data, "postgres")
        run = [*as_user, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust"]
        subprocess.run(run, check=True, capture_output=True)
        options = f"-p {port} -k {scratch} -c listen_addresses=127.0.0.1"
        ctl = [*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-l", f"{scratch}/log"]
        subprocess.run([*ctl, "-o", options, "-w", "start"], check=True, capture_output=True)
        try:
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            subprocess.run([*ctl, "-m", "fast", "-w", "stop"], check=False, capture_output=True)
