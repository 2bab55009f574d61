"""Idempotency storm: 8 processes submit the same 1,000 keys at once, shuffled and batched,
over HTTP to two server replicas on one Postgres: exactly 1,000 invocations, one id per key."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from loops import submit_keys
from procs import ServerProcess

from dreamlake.lakeshore.plane import HttpDispatch
from tests.support.postgres import in_processes, postgres_schema

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def test_eight_processes_two_replicas_one_thousand_keys(
    tmp_path: Path, rng: random.Random, seed: int
) -> None:
    keys = [f"key-{i:04d}" for i in range(1000)]
    with postgres_schema("lakeshore_storm") as url:
        first = ServerProcess(tmp_path / "a", url).start()
        # The second replica shares the store (and so the token) but has its own home.
        second = ServerProcess(tmp_path / "b", url).start()
        try:
            urls = [first.url, second.url]
            args = [(urls, first.token, "storm", keys, rng.randrange(1 << 30)) for _ in range(8)]
            answers = in_processes(submit_keys, args, timeout=120)
            maps = [m for m, _ in answers]
            retried = [r for _, rs in answers for r in rs]
            with HttpDispatch(first.url, token=first.token) as plane:
                queued = plane.count("storm", "queued")
            ids = {inv for m in maps for inv in m.values()}
            assert queued == 1000, f"[seed {seed}] {queued} invocations for 1000 keys"
            assert len(ids) == 1000, f"[seed {seed}] {len(ids)} distinct ids for 1000 keys"
            assert all(m == maps[0] for m in maps), f"[seed {seed}] processes disagree on ids"
            print(
                f"storm: processes=8 replicas=2 keys=1000 submits={8 * 1000} ids={len(ids)} "
                f"transient refusals={len(retried)} {retried[:2]}"
            )
        finally:
            first.stop()
            second.stop()
