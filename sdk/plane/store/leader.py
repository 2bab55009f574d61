"""Leadership leases in the store: one holder of a name at a time, until its lease runs out.

The singletons' election (plane/leader.py) over a plane that offers neither a shared file nor an
advisory lock: the controller over HTTP renews a row here (`POST .../leadership`), and a holder
that stops renewing loses the name once `ttl_s` has passed. Its own module, not tokens' (auth.py):
it shares nothing with who may touch a namespace.
"""

from __future__ import annotations

import time

from dreamlake.lakeshore.errors import InvalidArgument
from dreamlake.lakeshore.types import check_name

from .base import StoreBase

#: The longest a lead may be held before it is renewed (seconds).
MAX_LEADER_TTL_S = 3600.0


class LeaderStore(StoreBase):
    def acquire_leadership(self, name: str, holder: str, ttl_s: float) -> bool:
        """Hold leadership of `name` for `ttl_s` more seconds; False while another holds it."""
        check_name(name, "leadership")
        if not isinstance(holder, str) or not 0 < len(holder) <= 200 or not holder.isprintable():
            raise InvalidArgument(
                "holder must be 1 to 200 printable characters (a host and pid, say)"
            )
        if (
            isinstance(ttl_s, bool)
            or not isinstance(ttl_s, (int, float))
            or not 0 < ttl_s <= MAX_LEADER_TTL_S
        ):
            raise InvalidArgument(
                f"ttl_s must be a number of seconds in (0, {MAX_LEADER_TTL_S:g}], got {ttl_s!r}"
            )
        now = time.time()
        with self.connector.transaction() as tx:
            row = tx.one(
                "leader_acquire", name=name, holder=holder, expires_at=now + ttl_s, now=now
            )
        return row is not None

    def release_leadership(self, name: str, holder: str) -> None:
        """Give the name up now (a holder shutting down), if `holder` still holds it."""
        with self.connector.transaction() as tx:
            tx.all("leader_release", name=name, holder=holder)
