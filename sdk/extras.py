"""Which optional extra brings which module, and the one line that says so when one is missing.

The producer install is small on purpose; the daemon, the server, the Postgres store, S3 storage
and the rest each need an extra. Without it, a bare `ModuleNotFoundError: structlog` traceback
tells the user neither that the module is optional nor how to get it; every place that needs an
extra turns that into `MissingExtra`: one line, the missing module, the pip command.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from .errors import DispatchError

#: The distribution the extras belong to.
DISTRIBUTION: Final = "dreamlake-lakeshore"

#: Top-level module -> the extra (pyproject.toml) that installs it. tests/unit/test_extras.py
#: checks each against pyproject, so the two cannot drift apart.
EXTRA_OF: Final[dict[str, str]] = {
    "structlog": "daemon",
    "psutil": "daemon",
    "pynvml": "gpu",
    "starlette": "server",
    "uvicorn": "server",
    "prometheus_client": "server",
    "psycopg": "postgres",
    "psycopg_pool": "postgres",
    "boto3": "s3",
    "botocore": "s3",
    "yaml": "compose",
}


class MissingExtra(DispatchError, ImportError):
    """A feature's optional dependencies are not installed; the message names the module and
    the pip command that installs them.

    Also an `ImportError`, so code written to fall back when an optional import fails keeps
    doing so; a `DispatchError`, so the command line prints it as one line.
    """

    code = "missing_extra"
    status = 503  # the process serving a request lacks a part: not the client's fault


def install_hint(extra: str) -> str:
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def missing_extra(
    exc: ModuleNotFoundError, what: str, extra: str | None = None
) -> MissingExtra | None:
    """The `MissingExtra` for `exc` when an extra brings the missing module (`extra` names it
    where the module alone does not say, boto3 for ec2), else None: a module of our own or of
    the base install missing is a broken install or a bug, and keeps its traceback."""
    module = (exc.name or "").partition(".")[0]
    if module not in EXTRA_OF:
        return None
    extra = extra or EXTRA_OF[module]
    return MissingExtra(
        f"{what} needs the '{extra}' extra ({module} is missing): {install_hint(extra)}",
        name=module,
    )


@contextmanager
def needs_extra(what: str, extra: str | None = None) -> Iterator[None]:
    """Imports in this block that fail for want of an extra raise `MissingExtra` for `what`."""
    try:
        yield
    except ModuleNotFoundError as exc:
        error = missing_extra(exc, what, extra)
        if error is None:
            raise
        raise error from None


def require(module: str, what: str, extra: str | None = None) -> None:
    """Raise `MissingExtra` now if `module` is not installed, without importing it: for a
    feature chosen at start-up (a storage URL, a store) whose import happens later, at first
    use, where the failure would surface in a job instead of at the command line."""
    import importlib.util

    with needs_extra(what, extra):
        if importlib.util.find_spec(module) is None:
            raise ModuleNotFoundError(f"No module named {module!r}", name=module)
