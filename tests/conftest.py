"""Suite-wide: the longest real-process tests are collected first.

`make test` runs three workers per two cores (pytest-xdist hands out tests in collection
order). The runs that take half a minute each used to come last and ran alone at the end;
started first, they overlap the rest of the suite. Only whole modules move, so module
fixtures and the order inside each module are untouched.
"""

from __future__ import annotations

import os
import tempfile

import pytest

# The object store's host tier (an arena of shared memory) lives in a directory of the run's own,
# small, rather than in /dev/shm where it would outlive the run. Processes the tests start inherit
# it, so they share one arena as the processes of a box do.
os.environ.setdefault("LAKESHORE_OBJECTS", tempfile.mkdtemp(prefix="lakeshore-objects-"))
os.environ.setdefault("LAKESHORE_OBJECTS_CAP", str(256 << 20))
# An empty sysfs for `--spot-notice auto` (daemon/ec2host.py): no daemon a test starts takes the
# box for EC2, even on an EC2 runner, so none ever sends a packet to 169.254.169.254. A test of
# the EC2 path hands its daemon a fake EC2 sysfs and the stand-in metadata service instead.
os.environ.setdefault("LAKESHORE_SYS_ROOT", tempfile.mkdtemp(prefix="lakeshore-sys-"))
# Pending reasons (unschedulable, waiting_for_capacity, reserved_for) are written by a sweep that
# runs every 5 s; tests that wait for a reason wait for it a twentieth as long.
os.environ.setdefault("LAKESHORE_PENDING_SWEEP_S", "0.25")

#: Modules holding the longest tests (see `pytest --durations`), longest first: started first,
#: they overlap the short tests rather than run alone at the end.
FIRST = (
    "tests/faults/test_mixed.py",
    "tests/faults/test_network_faults.py",
    "tests/faults/test_storm.py",
    "tests/e2e/test_map_daemons.py",
    "tests/e2e/test_server_body_budget.py",
    "tests/e2e/test_spot_ec2.py",
    "tests/faults/test_server_faults.py",
    "tests/e2e/test_docs_blocks.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return FIRST.index(path) if path in FIRST else len(FIRST)

    items.sort(key=rank)  # stable: everything else keeps its order
