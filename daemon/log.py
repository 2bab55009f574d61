"""The daemon's logger: the shared format of sdk/logs.py under the name `lakeshore.daemon`.

Every line carries a stable `event` name (`job.claimed`, `job.settle_refused`, ...) and jobs are
bound as `invocation=<id>`, as in the server's and the controller's logs (see logs.py).
"""

from __future__ import annotations

from typing import Any

from dreamlake.lakeshore.logs import LEVELS, configure
from dreamlake.lakeshore.logs import get_logger as _named

__all__ = ["LEVELS", "configure", "get_logger"]


def get_logger(**bound: Any) -> Any:
    """A logger with `bound` fields on every line (`invocation=...`, `slot=...`)."""
    return _named("lakeshore.daemon", **bound)
