"""Fixtures of the fault suite: a seed per test, printed, and reproducible.

Every random choice a fault test makes (which job to kill, when, which fault to mix in) comes
from `rng`, seeded by `LAKESHORE_FAULT_SEED` (random when unset) and the test's name, so a
failure prints the seed that replays it:

    LAKESHORE_FAULT_SEED=1234 .venv/bin/python -m pytest tests/faults -k sigstop
"""

from __future__ import annotations

import os
import random
import sys
import zlib
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for path in (str(HERE), str(ROOT)):  # `history`, `procs`, `fault_jobs`, `tests.support`
    if path not in sys.path:
        sys.path.insert(0, path)

BASE_SEED = int(os.environ.get("LAKESHORE_FAULT_SEED") or random.SystemRandom().randrange(1 << 30))


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    value = BASE_SEED ^ zlib.crc32(request.node.name.encode())
    print(f"fault seed: LAKESHORE_FAULT_SEED={BASE_SEED} (test seed {value})")
    request.node.user_properties.append(("fault_seed", BASE_SEED))
    return value


@pytest.fixture
def rng(seed: int) -> random.Random:
    return random.Random(seed)


def pytest_report_header() -> str:
    return f"fault seed: LAKESHORE_FAULT_SEED={BASE_SEED}"
