"""The environment that names a process's control plane, and the box's own plane file.

Kept apart from `default.py` (which opens planes) so that the planes themselves (`dispatch.py`,
`http.py`) read the same variables without importing the module that imports them.
"""

from __future__ import annotations

import os
from pathlib import Path

from dreamlake.lakeshore.home import home
from dreamlake.lakeshore.types import DEFAULT_NAMESPACE

#: Each is read by one function below and nowhere else (tests/unit/test_layout.py keeps it so),
#: so what an empty value means is decided once: the same as unset.
URL_ENV = "LAKESHORE_URL"
TOKEN_ENV = "LAKESHORE_TOKEN"
NAMESPACE_ENV = "LAKESHORE_NAMESPACE"


def box_plane_path() -> Path:
    """The box's plane: the SQLite file under LAKESHORE_HOME that every process here shares."""
    return home() / "lakeshore.db"


def env_url() -> str | None:
    """The control plane's URL (or comma-separated replicas) from LAKESHORE_URL; None when unset."""
    return os.environ.get(URL_ENV) or None


def env_token() -> str | None:
    """The bearer token from LAKESHORE_TOKEN; None when unset."""
    return os.environ.get(TOKEN_ENV) or None


def env_namespace() -> str:
    """The namespace from LAKESHORE_NAMESPACE, else `default`."""
    return os.environ.get(NAMESPACE_ENV) or DEFAULT_NAMESPACE
