"""The cloud-init user-data that turns a fresh VM into one registered Lakeshore daemon.

It installs the package into /opt/lakeshore, writes the plane's URL and token to
/etc/lakeshore/lakeshore.env (0600, read by systemd before it drops privileges) and the
daemon's own settings to /etc/lakeshore/daemon-<name>.env, installs `lakeshore-daemon@.service`
and starts `lakeshore-daemon@<name>`. The unit names the worker `<host>-<instance>`; the env file
sets LAKESHORE_DAEMON_NAME so the row carries the name the controller tagged the VM with.

The token travels in user-data, which anyone allowed to DescribeInstanceAttribute (and every
process on the VM, through the metadata service) can read: give these VMs a token scoped to
their namespace, never an admin token.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from dreamlake.lakeshore import __version__
from dreamlake.lakeshore.daemon import unitfiles

from .base import LaunchSpec


def _env_line(key: str, value: str) -> str:
    return f"{key}={shlex.quote(value)}"


def render(spec: LaunchSpec, daemon: str, settings: Mapping[str, Any]) -> str:
    """The user-data script for one daemon named `daemon`."""
    package = settings.get("package") or f"dreamlake-lakeshore[daemon]=={__version__}"
    shared = [_env_line("LAKESHORE_NAMESPACE", spec.namespace)]
    if spec.plane_url:
        shared.append(_env_line("LAKESHORE_URL", spec.plane_url))
    if spec.plane_token:
        shared.append(_env_line("LAKESHORE_TOKEN", spec.plane_token))
    own = [
        _env_line("LAKESHORE_DAEMON_NAME", daemon),
        # click splits a multiple option's environment value on whitespace
        _env_line("LAKESHORE_DAEMON_QUEUE", " ".join(spec.queues)),
    ]
    if "concurrency" in settings:
        own.append(_env_line("LAKESHORE_DAEMON_CONCURRENCY", str(int(settings["concurrency"]))))
    labels = {**dict(settings.get("labels") or {}), **spec.labels}
    if labels:
        own.append(
            _env_line("LAKESHORE_DAEMON_LABEL", " ".join(f"{k}={v}" for k, v in labels.items()))
        )
    # The unit the wheel ships; the queue and the name come from the env file instead.
    unit = unitfiles.shipped("daemon").replace("--queue %i --name %l-%i ", "")
    return "\n".join(
        [
            "#!/bin/bash",
            "# Lakeshore daemon bootstrap (rendered by the ec2 provider).",
            "set -euo pipefail",
            "id lakeshore >/dev/null 2>&1 || useradd --system --home /var/lib/lakeshore lakeshore",
            "python3 -m venv /opt/lakeshore",
            f"/opt/lakeshore/bin/pip install --quiet {shlex.quote(str(package))}",
            "install -d -m 0755 /etc/lakeshore",
            "umask 077",
            "cat > /etc/lakeshore/lakeshore.env <<'LAKESHORE_EOF'",
            *shared,
            "LAKESHORE_EOF",
            f"cat > /etc/lakeshore/daemon-{daemon}.env <<'LAKESHORE_EOF'",
            *own,
            "LAKESHORE_EOF",
            "umask 022",
            "cat > /etc/systemd/system/lakeshore-daemon@.service <<'LAKESHORE_EOF'",
            unit.rstrip("\n"),
            "LAKESHORE_EOF",
            "systemctl daemon-reload",
            f"systemctl enable --now lakeshore-daemon@{daemon}",
            "",
        ]
    )
