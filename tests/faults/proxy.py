"""A TCP proxy on loopback that delays, drops and cuts connections, for the network faults.

    with ChaosProxy(upstream_port, rng) as proxy:      # listens on proxy.port
        proxy.set(delay_s=0.05, drop_p=0.2)            # every new chunk waits; 20% of new
        proxy.cut_all()                                # connections are reset at once
        proxy.set(slow=(b"/heartbeat ", 2.0))          # requests naming it wait 2 s each

It runs its own asyncio loop in a thread. A dropped connection is accepted and reset at once; a
cut resets every live one mid-stream (the client may have sent a request the server already
acted on: that is the lost-answer case); `blackhole` accepts and forwards nothing, so a client
sees only its own timeout; `refuse_upgrade` answers a WebSocket upgrade with 502, as a proxy
that cannot carry one does. `slow` holds back only the requests whose bytes hold a marker (a
path), so that one kind of call answers late while every other goes straight through.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
from dataclasses import dataclass


@dataclass
class Chaos:
    delay_s: float = 0.0
    drop_p: float = 0.0
    blackhole: bool = False
    #: (marker, seconds): a chunk from the client that holds `marker` waits that long.
    slow: tuple[bytes, float] | None = None
    #: Answer a WebSocket upgrade with 502, as a proxy that cannot carry one does.
    refuse_upgrade: bool = False


class ChaosProxy:
    def __init__(self, upstream_port: int, rng: random.Random, host: str = "127.0.0.1") -> None:
        self.upstream = (host, upstream_port)
        self.rng = random.Random(rng.random())
        self.chaos = Chaos()
        self.stats = {"connections": 0, "dropped": 0, "cut": 0, "slowed": 0}
        self._loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.base_events.Server | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-proxy", daemon=True)
        self.port = 0

    def __enter__(self) -> ChaosProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set(self, **fields: float | bool | tuple[bytes, float] | None) -> None:
        self.chaos = Chaos(**fields)  # type: ignore[arg-type]

    def cut_all(self) -> None:
        """Reset every live connection now (RST, not FIN: as a dead middlebox would)."""
        self._loop.call_soon_threadsafe(self._cut_all)

    def close(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    # -- the loop -----------------------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._server.close()
            self._cut_all()
            with contextlib.suppress(Exception):
                pending = asyncio.all_tasks(self._loop)
                for task in pending:
                    task.cancel()
                self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.close()

    def _cut_all(self) -> None:
        for writer in list(self._writers):
            self.stats["cut"] += 1
            _reset(writer)
        self._writers.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats["connections"] += 1
        if self.rng.random() < self.chaos.drop_p:
            self.stats["dropped"] += 1
            _reset(writer)
            return
        first = b""
        if self.chaos.refuse_upgrade:
            first = await reader.read(65536)
            if b"upgrade: websocket" in first.lower():
                self.stats["refused"] = self.stats.get("refused", 0) + 1
                writer.write(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
                with contextlib.suppress(Exception):
                    await writer.drain()
                    writer.close()
                return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            _reset(writer)
            return
        if first:
            up_writer.write(first)
        self._writers.update((writer, up_writer))
        try:
            await asyncio.gather(
                self._pipe(reader, up_writer, upstream=True), self._pipe(up_reader, writer)
            )
        finally:
            for w in (writer, up_writer):
                self._writers.discard(w)
                with contextlib.suppress(Exception):
                    w.close()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, upstream: bool = False
    ) -> None:
        try:
            while data := await reader.read(65536):
                while self.chaos.blackhole:
                    await asyncio.sleep(0.05)
                if self.chaos.delay_s:
                    await asyncio.sleep(self.rng.uniform(0, self.chaos.delay_s))
                slow = self.chaos.slow
                if upstream and slow is not None and slow[0] in data:
                    self.stats["slowed"] += 1
                    await asyncio.sleep(slow[1])
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.write_eof()


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError):
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(Exception):
        writer.transport.abort()
