"""The `plane` fixture: every conformance test runs once per plane in `planes.PLANES`."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:  # `planes` and `peer` import however pytest was started
    sys.path.insert(0, HERE)

from planes import PLANES, PeerPool, PlaneEnv  # noqa: E402


@pytest.fixture(scope="session")
def peer_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PeerPool]:
    pool = PeerPool(tmp_path_factory.mktemp("peers"))
    yield pool
    pool.close()


@pytest.fixture(params=list(PLANES))
def plane(
    request: pytest.FixtureRequest, tmp_path: Path, peer_pool: PeerPool
) -> Iterator[PlaneEnv]:
    with PLANES[request.param](tmp_path, peer_pool) as env:
        yield env
