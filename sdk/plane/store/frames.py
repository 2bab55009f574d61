"""The journal: frames of invocations and topics, fenced by the lease."""

from __future__ import annotations

import time

from ...errors import Conflict, InvalidArgument, LeaseLost, NotFound
from ...types import Frame
from .base import FRAME_PAGE, StoreBase


class FrameStore(StoreBase):
    """The journal: frames of invocations and topics, fenced by the lease."""

    def post(
        self, channel: str, kind: str, value: bytes | None, *, lease: str | None = None
    ) -> int:
        """Append a frame. Invocation journals need the attempt's lease; topics are open."""
        if kind not in ("VALUE", "ERROR", "END"):
            raise InvalidArgument(f"unknown frame kind '{kind}'; use VALUE|ERROR|END")
        now = time.time()
        with self.connector.transaction() as tx:
            if not channel.startswith("topic:"):
                held = tx.one("lease_of", id=channel)
                if held is None:
                    raise NotFound(f"unknown invocation '{channel}'")
                if lease is None or held["lease"] != lease or held["state"] != "running":
                    raise LeaseLost(
                        f"post refused: invocation '{channel}' is not held by this worker"
                    )
            last = tx.one("last_frame", channel=channel)
            if last is not None and last["kind"] in ("END", "ERROR"):
                raise Conflict(f"the journal of '{channel}' is closed (it ended at {last['seq']})")
            seq = self._append(tx, channel, kind, value, now)
        self.waker.notify(work=())
        return seq

    def frames(self, channel: str, since: int = -1, limit: int = FRAME_PAGE) -> list[Frame]:
        with self.connector.transaction(write=False) as tx:
            rows = tx.all("frames_since", channel=channel, since=since, limit=limit)
        return [Frame(seq=r["seq"], kind=r["kind"], value=r["value"]) for r in rows]
