"""How big a job's shipped tree may be, and what a producer is told as it nears the cap.

A folder that is mostly data (a checkpoint, a dataset that `.gitignore` does not name) is the
usual mistake, and the fix is one ignore line, so both the warning and the refusal name the
ten largest paths: the user sees at once what to exclude.
"""

from __future__ import annotations

import os
import warnings
from typing import Final

from dreamlake.lakeshore.errors import InvalidArgument

from .manifest import Manifest

__all__ = ["RuntimeSizeWarning", "check_size", "max_bytes"]

#: The default cap, in MiB (`LAKESHORE_RUNTIME_MAX_MB`).
DEFAULT_MAX_MB: Final = 1024
#: Past this share of the cap a submit warns.
WARN_SHARE: Final = 0.8


class RuntimeSizeWarning(UserWarning):
    """A job's shipped tree is near the size cap."""


def max_bytes() -> int:
    raw = os.environ.get("LAKESHORE_RUNTIME_MAX_MB", "")
    if not raw:
        return DEFAULT_MAX_MB << 20
    try:
        mb = float(raw)
    except ValueError:
        mb = -1.0
    if mb <= 0:
        raise InvalidArgument(f"LAKESHORE_RUNTIME_MAX_MB must be a number of MiB > 0, not {raw!r}")
    return int(mb * (1 << 20))


def check_size(manifest: Manifest, what: str) -> None:
    """Refuse a tree over the cap, warn near it; both name its largest paths."""
    cap, size = max_bytes(), manifest.size
    if size <= WARN_SHARE * cap:
        return
    largest = ", ".join(f"{e.path} ({mb(e.size)})" for e in manifest.largest())
    said = (
        f"{what} is {mb(size)} in {len(manifest.entries)} files, against a cap of {mb(cap)} "
        f"(LAKESHORE_RUNTIME_MAX_MB); largest: {largest}. Exclude what the job does not "
        "need in .gitignore or .lakeshoreignore, or Runtime(excludes=[...])"
    )
    if size > cap:
        raise InvalidArgument(said)
    warnings.warn(said, RuntimeSizeWarning, stacklevel=3)


def mb(size: int) -> str:
    """A size as a person reads it: 812 B, 4.0 KiB, 37.2 MiB, 1.5 GiB."""
    value, unit = float(size), "B"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            break
        value /= 1024
    return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
