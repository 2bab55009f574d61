"""The process-default plane, resolved on first use from the environment (never at import).

`LAKESHORE_URL` set: an `HttpPlane` to that control plane (with LAKESHORE_TOKEN and
LAKESHORE_NAMESPACE). Otherwise: the box's SQLite plane at `$LAKESHORE_HOME/lakeshore.db`
(`~/.lakeshore` by default), which every process on the box shares.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from dreamlake.lakeshore.home import home

from .base import Plane
from .env import box_plane_path, env_namespace, env_token, env_url

if TYPE_CHECKING:
    from .transport import ChannelMode

__all__ = ["box_plane_path", "default_plane", "env_namespace", "env_url", "open_plane"]
__all__ += ["env_token", "reset_default_plane"]  # env_*: read in env.py, kept importable here

_lock = threading.Lock()
_planes: dict[tuple[str, ...], Plane] = {}


def default_plane() -> Plane:
    url, token, namespace = env_url(), env_token(), env_namespace()
    key = (url or str(home()), namespace, token or "")
    with _lock:
        plane = _planes.get(key)
        if plane is None:
            plane = open_plane(url, token, namespace)
            _planes[key] = plane
        return plane


def open_plane(
    url: str | None, token: str | None, namespace: str | None, *, channel: ChannelMode = "off"
) -> Plane:
    """A new plane for a target: HTTP at `url`, else this box's SQLite file (uncached).
    `channel`: a daemon's, which keeps one channel open to its server (channel.py).

    The one place a target becomes a plane: the process default above, the CLI's flags and the
    daemon's all come through here.
    """
    ns = namespace or env_namespace()
    if url:
        from .http import HttpPlane

        return HttpPlane(url, token=token, namespace=ns, channel=channel)
    from .dispatch import Dispatch  # the store and SQLite: not loaded by an HTTP-only producer

    # A Dispatch (a LocalPlane too), so `isinstance(plane, dls.Dispatch)` holds as it always did.
    return Dispatch(box_plane_path(), namespace=ns)


def reset_default_plane() -> None:
    """Forget cached default planes (tests that change the environment)."""
    with _lock:
        for plane in _planes.values():
            plane.close()
        _planes.clear()
