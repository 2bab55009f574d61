"""EC2 spot notices from the instance metadata service, IMDSv2 (issue 35; `--spot-notice ec2`).

EC2 says two minutes ahead that it takes a spot instance back: `spot/instance-action` answers
404 until then, and `{"action": "terminate" | "stop" | "hibernate", "time": "...Z"}` after. A
rebalance recommendation (`events/recommendations/rebalance`, `{"noticeTime": ...}`) says the
instance is at elevated risk: only a reason to stop taking work. Polled every few seconds, with a
session token (PUT /latest/api/token), as IMDSv2 requires.

`LAKESHORE_IMDS_URL` points the watcher somewhere else than 169.254.169.254 (the tests' stand-in
for the metadata service). An unreachable or odd service is logged once and polled again: a
watcher's trouble never stops the daemon.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
import urllib.error
import urllib.request
from typing import Any, Protocol

IMDS_URL = "http://169.254.169.254"
#: How often the metadata service is asked (EC2 gives two minutes' notice).
POLL_S = 2.0
TOKEN_TTL_S = 21600
REQUEST_TIMEOUT_S = 2.0


class Target(Protocol):
    """What a notice acts on: the worker core."""

    _log: Any

    def preempt(self, reason: str, deadline: float | None = None) -> None: ...
    def pause_claiming(self, reason: str) -> None: ...


class SpotWatcher:
    def __init__(self, target: Target, stop: threading.Event, base: str | None = None) -> None:
        self._target = target
        self._stop = stop
        self._base = (base or os.environ.get("LAKESHORE_IMDS_URL") or IMDS_URL).rstrip("/")
        self._poll_s = float(os.environ.get("LAKESHORE_IMDS_POLL_S") or POLL_S)
        self._token: str | None = None
        self._failing = False

    def run(self) -> None:
        while not self._stop.wait(self._poll_s):
            try:
                if self.look():
                    return  # the box is going away: nothing more to watch
                self._failing = False
            except (OSError, ValueError) as exc:
                self._token = None
                if not self._failing:  # once per outage, not every poll
                    self._target._log.warning("daemon.imds_unreachable", error=str(exc))
                self._failing = True

    def look(self) -> bool:
        """Ask once; True once an interruption notice came (the daemon then stops)."""
        action = self._get("/latest/meta-data/spot/instance-action")
        if action is not None:
            notice = json.loads(action)
            deadline = _epoch(notice.get("time"))
            self._target.preempt(f"EC2 spot {notice.get('action', 'interruption')}", deadline)
            return True
        if self._get("/latest/meta-data/events/recommendations/rebalance") is not None:
            self._target.pause_claiming("EC2 rebalance recommendation")
        return False

    def _get(self, path: str) -> str | None:
        """The body at `path`, or None for a 404 (no notice)."""
        request = urllib.request.Request(
            self._base + path, headers={"X-aws-ec2-metadata-token": self._session()}
        )
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as answer:
                return str(answer.read().decode())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            if exc.code == 401:
                self._token = None  # expired: a new one on the next poll
            raise

    def _session(self) -> str:
        if self._token is None:
            request = urllib.request.Request(
                self._base + "/latest/api/token",
                method="PUT",
                headers={"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_S)},
            )
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as answer:
                self._token = answer.read().decode()
        return self._token


def _epoch(text: object) -> float | None:
    """`2026-12-04T08:22:00Z` as epoch seconds; None for anything else."""
    if not isinstance(text, str):
        return None
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()
