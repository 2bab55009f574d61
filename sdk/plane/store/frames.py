"""The journal: frames of invocations and topics, fenced by the lease."""

from __future__ import annotations

import re
import time

from dreamlake.lakeshore.errors import Conflict, InvalidArgument, LeaseLost, NotFound
from dreamlake.lakeshore.plane.connector import Row, Transaction
from dreamlake.lakeshore.types import Frame

from . import gangs
from .base import FRAME_PAGE, StoreBase
from .records import check_rank


class FrameStore(StoreBase):
    """The journal: frames of invocations and topics, fenced by the lease."""

    def post(
        self,
        channel: str,
        kind: str,
        value: bytes | None,
        *,
        lease: str | None = None,
        post_id: str | None = None,
    ) -> int:
        """Append a frame. Invocation journals need the attempt's lease; topics are open.

        `post_id`, minted by the client, makes the post safe to send again: a second post with
        the same id on the same channel returns the seq of the frame the first one made.
        """
        if kind not in ("VALUE", "ERROR", "END", "RESUME"):
            raise InvalidArgument(f"unknown frame kind '{kind}'; use VALUE|ERROR|END|RESUME")
        if kind == "RESUME" and channel.startswith("topic:"):
            raise InvalidArgument("a RESUME frame marks a job's resume; a topic has none")
        if post_id is not None:
            check_post_id(post_id)
        now = time.time()
        with self.connector.transaction() as tx:
            if post_id is not None:
                made = tx.one("frame_by_post_id", channel=channel, post_id=post_id)
                if made is not None:
                    return int(made["seq"])  # the same post again: its answer was lost
            rank = 0
            if not channel.startswith("topic:"):
                held = tx.one("lease_of", id=channel)
                if held is None:
                    raise NotFound(f"unknown invocation '{channel}'")
                if lease is None or held["lease"] != lease or held["state"] != "running":
                    rank = self._part_rank(tx, channel, lease, held)
            last = tx.one("last_frame", channel=channel)
            if last is not None and last["kind"] in ("END", "ERROR"):
                raise Conflict(f"the journal of '{channel}' is closed (it ended at {last['seq']})")
            seq = self._append(tx, channel, kind, value, now, post_id, rank=rank)
        self.waker.notify(work=())
        return seq

    def _part_rank(self, tx: Transaction, inv_id: str, lease: str | None, held: Row) -> int:
        """The rank whose output a post under `lease` is: a gang's part above rank 0 posts
        into its own rank's frames while its attempt runs (or after rank 0 succeeded, until
        the part itself ends). Anything else is refused as a stale worker's post."""
        part = None
        if lease is not None and held["nodes"] > 1:
            part = gangs.part_of(tx, inv_id, lease)
        if (
            part is None
            or part["state"] != "started"
            or not (part["gang_state"] == "started" or part["outcome"] == "succeeded")
        ):
            raise LeaseLost(f"post refused: invocation '{inv_id}' is not held by this worker")
        return int(part["rank"])

    def frames(
        self, channel: str, since: int = -1, limit: int = FRAME_PAGE, *, rank: int = 0
    ) -> list[Frame]:
        """Frames after `since`; of a gang's job, one rank's (0, the job's own, by default)."""
        check_rank(rank)
        with self.connector.transaction(write=False) as tx:
            rows = tx.all("frames_since", channel=channel, since=since, limit=limit, rank=rank)
        return [Frame(seq=r["seq"], kind=r["kind"], value=r["value"]) for r in rows]


#: A post id is a client's token for "this post": short printable ASCII (a ULID, a uuid).
POST_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")


def check_post_id(value: object) -> None:
    if not isinstance(value, str) or not POST_ID.fullmatch(value):
        raise InvalidArgument(
            f"a post id is 1-64 letters, digits, '-' or '_' (a ULID, say), got {value!r}"
        )
