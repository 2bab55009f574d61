"""sd_notify without libsystemd: the daemon's side of systemd's `Type=notify` protocol.

The protocol is one datagram of `KEY=VALUE` lines sent to the Unix socket named by
`NOTIFY_SOCKET` (a leading '@' names an abstract socket). Writing it here keeps the daemon free of
a C dependency and lets tests check it against a real socket. Outside systemd (no NOTIFY_SOCKET)
every call is a no-op, so the daemon never needs to ask where it runs.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Mapping


class Notifier:
    """Sends READY, STATUS, WATCHDOG, STOPPING and EXTEND_TIMEOUT_USEC to the service manager."""

    def __init__(self, address: str | None, watchdog_usec: int | None = None) -> None:
        self.address = address
        #: The service's WatchdogSec in microseconds, or None when the watchdog is off.
        self.watchdog_usec = watchdog_usec
        self._sock: socket.socket | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Notifier:
        """Read NOTIFY_SOCKET / WATCHDOG_USEC / WATCHDOG_PID as sd_notify(3) does."""
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET") or None
        watchdog: int | None = None
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        # WATCHDOG_PID names the process the watchdog is meant for; a child that inherited the
        # environment must not ping on its parent's behalf.
        if usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            watchdog = int(usec)
        return cls(address, watchdog)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    @property
    def watchdog_interval_s(self) -> float | None:
        """Ping at half the timeout, as sd_watchdog_enabled(3) recommends."""
        return None if self.watchdog_usec is None else self.watchdog_usec / 2 / 1e6

    def notify(self, **fields: str | int) -> bool:
        """Send one message; returns False (and never raises) when it could not be delivered.

        A lost notification must not take the daemon down: systemd will restart a daemon that
        misses READY or WATCHDOG, which is the right outcome, while a crash here would be a worse
        one.
        """
        if self.address is None or not fields:
            return False
        message = "\n".join(f"{key}={value}" for key, value in fields.items()).encode()
        target = "\0" + self.address[1:] if self.address.startswith("@") else self.address
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto(message, target)
        except OSError:
            return False
        return True

    def ready(self, status: str) -> bool:
        return self.notify(READY=1, STATUS=status, MAINPID=os.getpid())

    def status(self, status: str) -> bool:
        return self.notify(STATUS=status)

    def watchdog(self) -> bool:
        return self.notify(WATCHDOG=1)

    def stopping(self, status: str) -> bool:
        return self.notify(STOPPING=1, STATUS=status)

    def extend_timeout(self, seconds: float) -> bool:
        """Ask for `seconds` more before systemd's stop timeout kills a draining daemon."""
        return self.notify(EXTEND_TIMEOUT_USEC=max(1, int(seconds * 1e6)))

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None
