"""A join on Postgres (issue 36, item 5; celery#2725's stuck chords): one child after 2,000
parents, the parents acked at once from several threads over several connection pools (as
replicas would). The child is released exactly once, by the last parent's transaction: its
open-parents counter is decremented under its row lock, never read and then written.
Skips without a server, fails under CI=true (tests/support/postgres.py).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `tests.support` is importable however pytest was started
    sys.path.insert(0, str(ROOT))

import dreamlake.lakeshore as dls  # noqa: E402
from dreamlake.lakeshore.types import Claim, SubmitRequest  # noqa: E402
from tests.support import claiming  # noqa: E402
from tests.support.postgres import postgres_schema  # noqa: E402

pytest.importorskip("psycopg")
pytestmark = pytest.mark.postgres

PARENTS = 2_000
PLANES = 4
THREADS = 8


@pytest.fixture
def url() -> Iterator[str]:
    """The scratch schema, its commits not waiting for the WAL flush: every ack of a join
    takes the child's row lock, so the acks queue behind one another's commits, and what this
    test checks is that race, not the disk (2,000 flushes in a row take ~10 s on a busy box)."""
    with postgres_schema() as scoped:
        yield f"{scoped}&options=-c%20synchronous_commit%3Doff"


def test_a_join_over_many_parents_acked_at_once_releases_its_child_once(url: str) -> None:
    planes = [dls.Dispatch(url) for _ in range(PLANES)]
    try:
        first = planes[0]
        parents = first.submit("parents", [SubmitRequest(payload=b"\xc0")] * PARENTS)
        (child,) = first.submit("join", [SubmitRequest(payload=b"\xc0", after=tuple(parents))])
        assert first.invocation(child).waiting_on == PARENTS
        claims: list[Claim] = []
        while len(claims) < PARENTS:
            got = claiming.claim_many(first, ["parents"], worker="w", lease_s=300, limit=1000)
            assert got, f"claimed {len(claims)} of {PARENTS}"
            claims.extend(got)
        start = threading.Barrier(THREADS)

        def ack(k: int) -> None:
            plane = planes[k % PLANES]
            start.wait()
            for c in claims[k::THREADS]:
                plane.ack(c.id, c.lease, None)

        with ThreadPoolExecutor(THREADS) as pool:
            list(pool.map(ack, range(THREADS)))

        inv = first.invocation(child)
        assert inv.state == "queued" and inv.waiting_on == 0
        assert first.count("join", "queued") == 1 and first.count("join", "waiting") == 0
        assert first.count("parents", "succeeded") == PARENTS
        assert list(first.store.recount_check()) == []
        job = claiming.claim(first, ["join"], worker="w")
        assert job is not None and job.id == child
        assert claiming.claim(first, ["join"], worker="w") is None
    finally:
        for p in planes:
            p.close()
