"""A job's runtime: the code and requirements it brings to a worker that shares none of them.

`Runtime` (spec.py) is what a producer asks for; a folder becomes a `Manifest` (manifest.py)
under git's ignore rules and a few defaults (ignore.py), capped in size (limits.py); the
producer's own modules a job reaches are found by sources.py. Everything here is plain data
and runs in the producer: the daemon side (fetching, caching, building) lives in the daemon.
"""

from __future__ import annotations

from .limits import RuntimeSizeWarning, check_size
from .manifest import Entry, Manifest, check_path, scan
from .sources import Source, own_sources
from .spec import Runtime

__all__ = [
    "Entry",
    "Manifest",
    "Runtime",
    "RuntimeSizeWarning",
    "Source",
    "check_path",
    "check_size",
    "own_sources",
    "scan",
]
