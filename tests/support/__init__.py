"""Helpers shared by the e2e, conformance and fault suites (real processes, real ports)."""
