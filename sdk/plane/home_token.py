"""The box's admin token (`$LAKESHORE_HOME/token`), sent to the server that wrote it and to
nothing else.

A client without a token of its own (no `--token`, no LAKESHORE_TOKEN) used to send this file
to any loopback URL. But another port on the same box is another server, and any user of the box
may run one: `--url http://127.0.0.1:9999` (a typo, a copied command, a link) handed the admin
token to whoever listened there. So `lakeshore server`, once it listens, records beside the
token where it does (`token.address`: the digest of the token it belongs to, the scheme, and
the address and port of every socket it bound), and a client sends the token only when every
URL it was given reaches one of those sockets:

- the scheme and the port are the recorded ones;
- the host is a loopback address the server bound (127.0.0.1, ::1), or any loopback address of
  the family of a wildcard it bound (0.0.0.0 covers 127.0.0.0/8, :: covers ::1); `localhost`
  only when every address it resolves to is covered, since a server bound to 127.0.0.1 does
  not own [::1] on the same port, and another user may;
- no proxy stands between (the proxy would receive the header).

The server records on every start while `token` is one of its store's tokens, so a server
restarted on another port is still reached, and removes the record when it stops; a server of
another store under the same home leaves the record alone. What this cannot tell: a stranger's
server on the recorded port after the issuing server died without stopping (kill -9, a power
cut) and before it starts again. The record names the process that wrote it (`pid`), for the
one that reads it by hand.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import socket
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from dreamlake.lakeshore.home import home

from . import http11
from .auth import hash_token

#: The admin token a fresh server writes, and the record of where that server listens.
TOKEN_FILE = "token"
ADDRESS_FILE = "token.address"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Listener = tuple[IPAddress, int]


def record_listener(
    folder: Path, token: str, scheme: str, sockets: Iterable[tuple[str, int]]
) -> Path:
    """Write, beside `folder/token`, where the server that holds `token` listens (mode 0600,
    replacing what was there in one rename)."""
    record = {
        "sha256": hash_token(token),
        "scheme": scheme,
        "listen": [[host, port] for host, port in sockets],
        "pid": os.getpid(),
    }
    path = folder / ADDRESS_FILE
    tmp = folder / f".{ADDRESS_FILE}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(record, out)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return path


def forget_listener(folder: Path) -> None:
    """Remove the record this process wrote (a server stopping); one another process wrote since
    (a second server of the same store under this home) stays."""
    path = folder / ADDRESS_FILE
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if isinstance(record, dict) and record.get("pid") == os.getpid():
        with contextlib.suppress(OSError):
            path.unlink()


def home_token(urls: Sequence[str]) -> str | None:
    """The box's admin token when every one of `urls` reaches the server that wrote it, else
    None (and the request goes without one)."""
    folder = home()
    try:
        token = (folder / TOKEN_FILE).read_text().strip()
        record = json.loads((folder / ADDRESS_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not token or not isinstance(record, dict) or record.get("sha256") != hash_token(token):
        return None  # no record, or one of a token since replaced
    scheme, listening = record.get("scheme"), _listeners(record.get("listen"))
    if not urls or not listening:
        return None
    return token if all(_reaches(url, scheme, listening) for url in urls) else None


def _listeners(value: Any) -> list[Listener]:
    out: list[Listener] = []
    for item in value if isinstance(value, list) else []:
        with contextlib.suppress(TypeError, ValueError):
            host, port = item
            out.append((ipaddress.ip_address(host), int(port)))
    return out


def _reaches(url: str, scheme: object, listening: list[Listener]) -> bool:
    """Whether a request to `url` can only land on one of the `listening` sockets."""
    parts = urlsplit(url)
    if parts.scheme != scheme:
        return False
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return False
    addresses = _addresses(parts.hostname or "")
    return (
        bool(addresses)
        and all(a.is_loopback and _covered(a, port, listening) for a in addresses)
        and http11.usable(url)
    )


def _addresses(host: str) -> list[IPAddress]:
    """The addresses a URL's host names: itself when it is one; what `localhost` resolves to;
    nothing for any other name (a name is not this box's to vouch for)."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    if host.lower() != "localhost":
        return []
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return []
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


def _covered(address: IPAddress, port: int, listening: list[Listener]) -> bool:
    return any(
        port == bound_port
        and (address == bound or (bound.is_unspecified and bound.version == address.version))
        for bound, bound_port in listening
    )
