"""A stand-in for EC2's instance metadata service (IMDSv2), the one fake AWS these tests use
beside moto: a session token, then 404 for the spot instance-action until a test sets `action`
on the server (`imds.action = {"action": "terminate", "time": "...Z"}`).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any


class Imds(http.server.BaseHTTPRequestHandler):
    """A stand-in for EC2's instance metadata service (IMDSv2): a token, then 404 for the
    spot instance-action until the test sets `action` on the server."""

    server: Any

    def do_PUT(self) -> None:
        if self.path != "/latest/api/token" or not self.headers.get(
            "X-aws-ec2-metadata-token-ttl-seconds"
        ):
            self.send_error(400)
            return
        self._answer(200, b"token-1")

    def do_GET(self) -> None:
        if self.headers.get("X-aws-ec2-metadata-token") != "token-1":
            self.send_error(401)
            return
        action = self.server.action
        if self.path == "/latest/meta-data/spot/instance-action" and action is not None:
            self._answer(200, json.dumps(action).encode())
        else:
            self.send_error(404)

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@contextlib.contextmanager
def standin_imds() -> Iterator[Any]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Imds)
    server.action = None  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
