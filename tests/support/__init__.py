"""Helpers shared by the e2e, conformance and fault suites (real processes, real ports)."""

#: Settings of the box rather than of one process: the object store's host tier (conftest.py
#: points it at a directory of the run's own), and the suite's quicker pending-reason sweep.
#: Processes a test starts keep them, as the processes of one box share one host tier.
BOX_VARS = (
    "LAKESHORE_OBJECTS",
    "LAKESHORE_OBJECTS_CAP",
    "LAKESHORE_HOST_ID",
    "LAKESHORE_SYS_ROOT",
    "LAKESHORE_PENDING_SWEEP_S",
)
