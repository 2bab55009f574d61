"""What a daemon's jobs hold of its credentials: none of the daemon's, a token of their own.

A job is code from whoever could submit it; the daemon is the worker, whose token claims and
settles every job of its queues. So, once `lakeshore-daemon` has read its secrets:

- `seal_process` takes them out of the environment its job processes inherit (LAKESHORE_TOKEN,
  LAKESHORE_TOKEN_FILE, any other LAKESHORE_*TOKEN* a shared EnvironmentFile brings, and the
  payload-signing key or its file's path), and makes the daemon non-dumpable (Linux
  `PR_SET_DUMPABLE`): a job runs as the daemon's user, and could otherwise read the daemon's
  first environment, which /proc/<daemon>/environ keeps whatever the daemon removes, or its
  memory. Only root reads them then. A job's own process is dumpable as usual (exec resets it).
- `job_credentials` puts one job's own token (plane/job_token.py) in its process's environment
  while that job runs, and takes it away after, with any plane the job opened with it.

What this cannot hide from a job: files the daemon's user may read. A `--token-file` the
daemon reads is one; under systemd, keep the token in a root-only EnvironmentFile instead.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, MutableMapping

#: Where a job, and the SDK in it, finds its token.
TOKEN_ENV = "LAKESHORE_TOKEN"
#: Words in the names of the Lakeshore variables that hold a secret, or name its file.
SECRET_WORDS = ("TOKEN", "SIGNING")
_PR_SET_DUMPABLE = 4


def secret(name: str) -> bool:
    """Whether an environment variable holds (or names the file of) a daemon's secret: a token
    or the payload-signing key (LAKESHORE_SIGNING_KEY, LAKESHORE_DAEMON_SIGNING_KEY_FILE)."""
    return name.startswith("LAKESHORE_") and any(word in name for word in SECRET_WORDS)


def seal_process(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Remove the daemon's secrets from `environ` (this process's: what children inherit) and
    stop other processes of this user reading the daemon's memory and first environment.
    Returns the names removed (for the log: never the values)."""
    env = os.environ if environ is None else environ
    removed = sorted(name for name in env if secret(name))
    for name in removed:
        del env[name]
    if environ is None:
        not_dumpable()
    return removed


def not_dumpable() -> bool:
    """PR_SET_DUMPABLE 0 on Linux: /proc/<pid>/environ, mem, fd, ... become root's, no ptrace
    from this user's other processes, no core dump. False where it is not available."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes  # here: a job's process imports this module, and never needs it

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


@contextlib.contextmanager
def job_credentials(token: str | None) -> Iterator[None]:
    """Run one job with `token` as its LAKESHORE_TOKEN (none: no token at all), then forget it
    and every plane opened with it, so the next job of this process starts with nothing."""
    if token:
        os.environ[TOKEN_ENV] = token
    else:
        os.environ.pop(TOKEN_ENV, None)
    try:
        yield
    finally:
        os.environ.pop(TOKEN_ENV, None)
        _forget_planes()


def _forget_planes() -> None:
    """Close the job's default plane, and drop the object tier's memory of planes, without
    importing either module for a job that used neither."""
    default = sys.modules.get("dreamlake.lakeshore.plane.default")
    if default is not None:
        default.reset_default_plane()
    objects = sys.modules.get("dreamlake.lakeshore.objects.plane")
    if objects is not None:
        objects.forget_planes()
