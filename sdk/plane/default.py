"""The process-default plane, resolved on first use from the environment (never at import).

`LAKESHORE_URL` set: an `HttpPlane` to that control plane (with LAKESHORE_TOKEN and
LAKESHORE_NAMESPACE). Otherwise: the box's SQLite plane at `$LAKESHORE_HOME/lakeshore.db`
(`~/.lakeshore` by default), which every process on the box shares.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from dreamlake.lakeshore.home import home
from dreamlake.lakeshore.types import DEFAULT_NAMESPACE

from .base import Plane

#: The environment that names a process's control plane. Each is read by one function below and
#: nowhere else (tests/unit/test_layout.py keeps it so), so what an empty value means is decided
#: once: the same as unset.
URL_ENV = "LAKESHORE_URL"
TOKEN_ENV = "LAKESHORE_TOKEN"
NAMESPACE_ENV = "LAKESHORE_NAMESPACE"

_lock = threading.Lock()
_planes: dict[tuple[str, ...], Plane] = {}


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


def default_plane() -> Plane:
    url, token, namespace = env_url(), env_token(), env_namespace()
    key = (url or str(home()), namespace, token or "")
    with _lock:
        plane = _planes.get(key)
        if plane is None:
            plane = open_plane(url, token, namespace)
            _planes[key] = plane
        return plane


def open_plane(url: str | None, token: str | None, namespace: str | None) -> Plane:
    """A new plane for a target: HTTP at `url`, else this box's SQLite file (uncached).

    The one place a target becomes a plane: the process default above, the CLI's flags and the
    daemon's all come through here.
    """
    ns = namespace or env_namespace()
    if url:
        from .http import HttpPlane

        return HttpPlane(url, token=token, namespace=ns)
    from .dispatch import Dispatch  # the store and SQLite: not loaded by an HTTP-only producer

    # A Dispatch (a LocalPlane too), so `isinstance(plane, dls.Dispatch)` holds as it always did.
    return Dispatch(box_plane_path(), namespace=ns)


def reset_default_plane() -> None:
    """Forget cached default planes (tests that change the environment)."""
    with _lock:
        for plane in _planes.values():
            plane.close()
        _planes.clear()
