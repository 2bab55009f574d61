"""sd_notify against a real datagram socket, path and abstract addresses alike."""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from dreamlake.lakeshore.daemon.systemd import Notifier


def _fields(data: bytes) -> dict[str, str]:
    return dict(line.split("=", 1) for line in data.decode().splitlines())


@pytest.fixture
def abstract_socket() -> Iterator[tuple[str, socket.socket]]:
    name = f"lakeshore-unit-{secrets.token_hex(6)}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(5)
    yield "@" + name, sock
    sock.close()


def test_ready_status_and_stopping_reach_an_abstract_socket(
    abstract_socket: tuple[str, socket.socket],
) -> None:
    address, sock = abstract_socket
    notifier = Notifier(address)
    try:
        assert notifier.ready("serving gpu: 0/2 slots busy")
        ready = _fields(sock.recv(4096))
        assert ready == {
            "READY": "1",
            "STATUS": "serving gpu: 0/2 slots busy",
            "MAINPID": str(os.getpid()),
        }
        assert notifier.stopping("draining")
        assert _fields(sock.recv(4096)) == {"STOPPING": "1", "STATUS": "draining"}
        assert notifier.extend_timeout(90.5)
        assert _fields(sock.recv(4096)) == {"EXTEND_TIMEOUT_USEC": "90500000"}
        assert notifier.watchdog()
        assert _fields(sock.recv(4096)) == {"WATCHDOG": "1"}
    finally:
        notifier.close()


def test_a_filesystem_socket_works_too(tmp_path: Path) -> None:
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(5)
    notifier = Notifier.from_env({"NOTIFY_SOCKET": str(path)})
    try:
        assert notifier.status("3/4 slots busy")
        assert _fields(sock.recv(4096)) == {"STATUS": "3/4 slots busy"}
    finally:
        notifier.close()
        sock.close()


def test_without_notify_socket_every_call_is_a_no_op() -> None:
    notifier = Notifier.from_env({})
    assert not notifier.enabled
    assert notifier.ready("x") is False
    assert notifier.watchdog_interval_s is None


def test_a_vanished_socket_is_reported_not_raised(tmp_path: Path) -> None:
    notifier = Notifier(str(tmp_path / "nobody-listens.sock"))
    try:
        assert notifier.status("hello") is False
    finally:
        notifier.close()


def test_watchdog_interval_is_half_of_watchdog_usec_and_respects_watchdog_pid() -> None:
    mine = Notifier.from_env({"WATCHDOG_USEC": "20000000", "WATCHDOG_PID": str(os.getpid())})
    assert mine.watchdog_interval_s == 10.0
    theirs = Notifier.from_env({"WATCHDOG_USEC": "20000000", "WATCHDOG_PID": "1"})
    assert theirs.watchdog_interval_s is None
    unset = Notifier.from_env({"WATCHDOG_USEC": "0"})
    assert unset.watchdog_interval_s is None
